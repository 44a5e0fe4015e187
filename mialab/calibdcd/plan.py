"""CalibDCD's content-addressed stage instances for a config (``rules/calibdcd.smk``), built with
:meth:`mialab.pipeline.plan.Plan.stage`. Pure: reads the config, runs nothing.

- reference (dataset): DPDLLM's reference model fine-tuned on every pool text (no label read);
  upstream the pool and the base reference model;
- partition (dataset, seed): upstream the seed's split;
- perturbation (dataset): VeilProbe's key-token perturbation of every pool text (no target, no
  label read); upstream the pool, its key-token and fill-mask models in its config;
- features (model, dataset, scope): scope ``original`` (``e0`` on every pool text) depends on the
  model and the pool only (DPDLLM's fine-tuned reference, VeilProbe's perturbation), so it is shared by every seed and
  survives changes of seeds, split sizes and partition sizes; scope ``views`` (controlled views on
  the D-cal texts of every seed, each text once; DPDLLM only) depends on the seeds' partitions;
- veilprobe (model, dataset): VeilProbe's mapping models and features of both scopes; upstream the
  original scope's generations and the seeds' partitions (D-cal);
- scores (model, dataset): one job calibrates every detector on every seed (upstream the splits,
  the partitions and each detector's feature tables of both scopes); a (detector, seed)'s tables sit in
  ``<key>/<detector>/seed-<s>/`` (:meth:`CalibDCDPlan.scores`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from mialab.calibdcd.views import ORIGINAL, controlled_views
from mialab.data.registry import config_schema
from mialab.pipeline.columns import Columns
from mialab.pipeline.config import ConfigError, check_generation, check_names
from mialab.pipeline.methods import MethodPlan
from mialab.pipeline.plan import SEED_PART, Stage, seed_part
from mialab.scoring.baselines import column_name

#: the detector keys naming a language model (a configured model, a local path or a hub id; a list for
#: ``key_token_models``): DPDLLM's reference, VeilProbe's key-token (attribution) models and fill-mask model
LM_KEYS = ("reference_model", "key_token_model", "key_token_models", "mlm_model")
ORIGINAL_SCOPE, VIEWS_SCOPE = "original", "views"
SCOPES = (ORIGINAL_SCOPE, VIEWS_SCOPE)
#: the veilprobe section's keys of :func:`mialab.calibdcd.extract.add_perturbed_query` besides its models
PERTURBATION_KEYS = ("query", "ratio", "perturbation", "mlm_model", "beams", "new_tokens", "ot_topk", "ot_iterations",
                     "seed")


UNCALIBRATED = "original"  # the variant name of a detector's uncalibrated score


def score_column(detector: str, variant: str) -> str:
    """Results-table name of a CalibDCD score: ``calibdcd/<detector>/<variant>`` (``original``: uncalibrated)."""
    return f"calibdcd/{detector}/{variant}"


def perturbation_options(veilprobe: Mapping) -> dict:
    """:func:`mialab.calibdcd.extract.add_perturbed_query`'s settings from the veilprobe section: the
    key-token models (``key_token_models``, or the one ``key_token_model``) and :data:`PERTURBATION_KEYS`."""
    models = veilprobe.get("key_token_models") or [veilprobe["key_token_model"]]
    return {"key_token_models": list(models), **{k: veilprobe[k] for k in PERTURBATION_KEYS if k in veilprobe}}


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ValueError(f"unknown feature scope {scope!r}; known: {', '.join(SCOPES)}")
    return scope


class CalibDCDPlan(MethodPlan):
    """CalibDCD stage instances of a config (``config['calibdcd']``; absent: nothing to run)."""

    section = "calibdcd"

    def check(self) -> None:
        """Cross-references of the ``calibdcd`` section and its generation options (nothing that loads code),
        with errors naming the key."""
        gen = self.spec["generation"]
        check_generation("calibdcd.generation.backend_options", gen["backend"], gen["backend_options"])
        check_names("calibdcd.models", self.spec["models"], self.config["models"], "model")
        check_names("calibdcd.datasets", self.spec.get("datasets", []), self.config["datasets"], "dataset")
        vp = self.spec["detectors"].get("veilprobe")
        if vp is not None:
            key = "calibdcd.detectors.veilprobe"
            if ("key_token_model" in vp) == ("key_token_models" in vp):
                raise ConfigError(f"{key}: name the key-token models once, as key_token_model (one) or "
                                  "key_token_models")
            if vp.get("perturbation") == "original" and "mlm_model" not in vp:
                raise ConfigError(f"{key}: perturbation original needs an mlm_model (VeilProbe's code: "
                                  "bert-base-cased)")
            if vp.get("perturbation") == "surprisal" and len(vp.get("key_token_models", [None])) != 1:
                raise ConfigError(f"{key}: perturbation surprisal reads one key-token model, "
                                  f"got {vp['key_token_models']}")

    def pairs(self) -> list[tuple[str, str]]:
        """(model, dataset) pairs CalibDCD runs on: its models' evaluated pairs among its datasets."""
        if not self.spec:
            return []
        pairs = self.plan.evaluated_pairs(self.spec.get("datasets") or self.plan.dataset_names())
        return [(m, d) for m, d in pairs if m in self.spec["models"]]

    def baselines(self) -> list[str]:
        """The likelihood baselines the report puts beside the detectors: the configured Min-K%++ columns."""
        if not self.spec or "min_k_plus_plus" not in self.config["scoring"]["methods"]:
            return []
        return [column_name("min_k_plus_plus", k) for k in self.config["scoring"]["k"]]

    def detectors(self) -> list[str]:
        return list(self.spec["detectors"]) if self.spec else []

    def columns(self) -> list[Columns]:
        """Each detector's score columns (:mod:`mialab.pipeline.columns`; every detector the schema knows):
        uncalibrated, and every variant, where the config runs the detector."""
        known = config_schema()["properties"]["calibdcd"]["properties"]["detectors"]["properties"]
        variants = [UNCALIBRATED, *self.spec["variants"]] if self.spec else []
        return [Columns(f"calibdcd ({d})", score_column(d, ".+"),
                        tuple(score_column(d, v) for v in variants) if d in self.detectors() else (),
                        "calibdcd.detectors, calibdcd.variants", tuple(self.pairs())) for d in known]

    def report_outputs(self) -> dict[str, str]:
        """The report's files (rule calibdcd_report), by name."""
        tables = ("main", "ablations", "recovery", "selection", "views")
        return {"markdown": self.plan.output("calibdcd", "report.md"),
                **{name: self.plan.output("calibdcd", f"{name}.csv") for name in tables}}

    def score_providers(self) -> list:
        """Each detector's score table of a (model, dataset, seed) it runs on, else None."""
        pairs = self.pairs()

        def provider(detector: str):
            def scores_file(model: str, dataset: str, seed: int) -> str | None:
                if (model, dataset) not in pairs:
                    return None
                return self.scores(model, dataset, detector, seed).path("scores.parquet")
            return scores_file

        return [provider(d) for d in self.detectors()]

    def targets(self) -> list[str]:
        """The report, where CalibDCD runs on any (model, dataset)."""
        return list(self.report_outputs().values()) if self.pairs() else []

    def runs(self, seeds: list[int]) -> list[tuple[str, str, str, int]]:
        """(model, dataset, detector, seed) of every calibration (a score table each)."""
        return [(m, d, det, int(s)) for m, d in self.pairs() for det in self.detectors() for s in seeds]

    # -- language models besides the target ------------------------------------------------------
    def lm_path(self, name: str) -> str:
        """A reference / key-token / fill-mask LM: a configured model's folder, else the local path or hub id."""
        return self.plan.model_path(name) if name in self.config["models"] else name

    def lm_key(self, name: str) -> dict:
        """What identifies that LM in a key: the configured model's key, else the path or hub id."""
        return {"model": name, "key": self.plan.model(name).key} if name in self.config["models"] else {"path": name}

    def lm_models(self, keys: tuple[str, ...] = LM_KEYS) -> list[str]:
        """Configured models named under ``keys`` (:data:`LM_KEYS`' LMs; their folders are job inputs)."""
        names = [n for spec in self.spec["detectors"].values() for k in keys
                 for n in (spec[k] if isinstance(spec.get(k), list) else [spec.get(k)])]
        return [n for n in dict.fromkeys(names) if n in self.config["models"]]

    def detector_specs(self, resolve, dataset: str | None = None, scope: str = ORIGINAL_SCOPE) -> dict[str, dict]:
        """The detectors' feature-job config of ``scope``: each LM name replaced by ``resolve(name)``;
        VeilProbe's sampling length from the ``generation`` section, its perturbation and mapping models
        left out (their own stages, :meth:`perturbation`, :meth:`veilprobe`), and VeilProbe only in the original scope (its features read the
        views' queries, not the target's answers to them). With ``dataset``, DPDLLM's reference is that
        pool's fine-tuned model folder (:meth:`reference`), its fine-tuning settings, which that
        folder's key holds, left out."""
        def resolved(k, v):
            return ([resolve(n) for n in v] if isinstance(v, list) else resolve(v)) if k in LM_KEYS else v

        perturbation = {"key_token_model", "key_token_models", *PERTURBATION_KEYS}  # their own stage
        specs = {det: {k: resolved(k, v) for k, v in spec.items()
                       if k != "mapping" and (det != "veilprobe" or k not in perturbation)}
                 for det, spec in self.spec["detectors"].items()
                 if det != "veilprobe" or check_scope(scope) == ORIGINAL_SCOPE}
        if "veilprobe" in specs:
            specs["veilprobe"]["max_new_tokens"] = self.spec["generation"]["max_new_tokens"]
        if "dpdllm" in specs and dataset is not None:
            specs["dpdllm"] = {k: v for k, v in specs["dpdllm"].items() if k != "finetune"}
            specs["dpdllm"]["reference_model"] = self.reference(dataset).path("model")
        return specs

    def perturbation_settings(self, resolve) -> dict:
        """VeilProbe's perturbation options (:func:`perturbation_options`), each
        key-token and fill-mask LM replaced by ``resolve(name)``."""
        options = perturbation_options(self.spec["detectors"]["veilprobe"])
        options["key_token_models"] = [resolve(n) for n in options["key_token_models"]]
        if "mlm_model" in options:
            options["mlm_model"] = resolve(options["mlm_model"])
        return options

    def feature_tables(self, model: str, dataset: str, detector: str) -> list[tuple[Stage, str]]:
        """(stage, file) of a detector's feature tables of the original and the views scope."""
        if detector == "veilprobe":
            run = self.veilprobe(model, dataset)
            return [(run, "features-original.parquet"), (run, "features-views.parquet")]
        return [(self.features(model, dataset, scope), f"features-{detector}.parquet")
                for scope in (ORIGINAL_SCOPE, VIEWS_SCOPE)]

    def views(self, model: str, scope: str) -> list[str]:
        """``e0`` alone for the original scope, else the model family's ten controlled views."""
        if check_scope(scope) == ORIGINAL_SCOPE:
            return [ORIGINAL]
        return controlled_views(self.spec["models"][model]["family"])

    # -- stages ------------------------------------------------------------------------------------
    @functools.lru_cache(maxsize=None)
    def partition(self, dataset: str, seed: int) -> Stage:
        return self.plan.stage("calibdcd/partitions", {"dataset": dataset, "seed": int(seed)}, {
            "dataset": dataset, "seed": int(seed), "config": self.spec["partition"],
            "upstream": {"split": self.plan.split(dataset, int(seed)).key},
        })

    @functools.lru_cache(maxsize=None)
    def reference(self, dataset: str) -> Stage:
        """DPDLLM's reference model of a pool: the base model fine-tuned on every pool text."""
        dp = self.spec["detectors"]["dpdllm"]
        return self.plan.stage("calibdcd/references", {"dataset": dataset}, {
            "dataset": dataset, "base": self.lm_key(dp["reference_model"]), "length": dp["length"],
            "finetune": dp["finetune"],
            "upstream": {"pool": self.plan.pool(dataset).key},
        })

    @functools.lru_cache(maxsize=None)
    def perturbation(self, dataset: str) -> Stage:
        """VeilProbe's queries of a pool and their perturbation: the same for every target (the code: once per
        dataset)."""
        return self.plan.stage("calibdcd/perturbations", {"dataset": dataset}, {
            "dataset": dataset, "config": {**self.perturbation_settings(self.lm_key), "lm": self.spec["lm"]},
            "upstream": {"pool": self.plan.pool(dataset).key},
        })

    @functools.lru_cache(maxsize=None)
    def features(self, model: str, dataset: str, scope: str) -> Stage:
        upstream = {"model": self.plan.model(model).key, "pool": self.plan.pool(dataset).key}
        if "dpdllm" in self.spec["detectors"]:
            upstream["reference"] = self.reference(dataset).key
        if "veilprobe" in self.spec["detectors"] and check_scope(scope) == ORIGINAL_SCOPE:
            upstream["perturbation"] = self.perturbation(dataset).key
        if check_scope(scope) == VIEWS_SCOPE:
            upstream["partitions"] = {str(s): self.partition(dataset, s).key for s in self.plan.seeds()}
        return self.plan.stage("calibdcd/features", {"model": model, "dataset": dataset, "scope": scope}, {
            "model": model, "dataset": dataset, "scope": scope, "views": self.views(model, scope),
            "config": {"generation": self.spec["generation"], "lm": self.spec["lm"],
                       "detectors": self.detector_specs(self.lm_key, scope=scope)},
            "upstream": upstream,
        })

    @functools.lru_cache(maxsize=None)
    def veilprobe(self, model: str, dataset: str) -> Stage:
        """VeilProbe's mapping models of a (target, pool) and its features of both scopes."""
        return self.plan.stage("calibdcd/veilprobe", {"model": model, "dataset": dataset}, {
            "model": model, "dataset": dataset, "views": self.views(model, VIEWS_SCOPE),
            "config": {"mapping": self.spec["detectors"]["veilprobe"]["mapping"], "lm": self.spec["lm"]},
            "upstream": {"original": self.features(model, dataset, ORIGINAL_SCOPE).key,
                         "partitions": {str(s): self.partition(dataset, s).key for s in self.plan.seeds()}},
        })

    @functools.lru_cache(maxsize=None)
    def score_run(self, model: str, dataset: str) -> Stage:
        """The calibration job of a (model, dataset): every detector, every seed."""
        seeds = self.plan.seeds()
        return self.plan.stage("calibdcd/scores", {"model": model, "dataset": dataset}, {
            "model": model, "dataset": dataset, "detectors": self.detectors(), "seeds": seeds,
            "config": {k: self.spec[k] for k in ("variants", "tau", "tolerance")},
            "upstream": {"splits": {str(s): self.plan.split(dataset, s).key for s in seeds},
                         "partitions": {str(s): self.partition(dataset, s).key for s in seeds},
                         "features": {det: [stage.key for stage, _ in self.feature_tables(model, dataset, det)]
                                      for det in self.detectors()}},
        })

    def score_patterns(self, name: str) -> list[str]:
        """Rule calibdcd_calibrate's outputs ``name`` of every (detector, seed), the folders of :meth:`scores`."""
        return [self.plan.pattern("calibdcd/scores", det, SEED_PART, name, seed=s)
                for det in self.detectors() for s in self.plan.seeds()]

    def scores(self, model: str, dataset: str, detector: str, seed: int) -> Stage:
        """A (detector, seed)'s part of :meth:`score_run`: ``<key>/<detector>/seed-<s>/``."""
        run = self.score_run(model, dataset)
        if detector not in run.manifest["detectors"]:
            raise KeyError(f"detector {detector!r} is not calibrated; configured: {run.manifest['detectors']}")
        return seed_part(Stage(run.stage, run.key, os.path.join(run.dir, detector), run.manifest), seed)
