"""LaRA's content-addressed stage instances for a config (``rules/lara.smk``), built with
:meth:`mialab.pipeline.plan.Plan.stage`. Pure: reads the config, runs nothing.

- perturbations (dataset; a table per seed): upstream the pool (known non-members) and the seeds'
  splits; model-free, so shared by every model;
- features / baselines (model, dataset): one job per model reads every seed's perturbations (the
  seeds' splits share questions and neighbours: each distinct text is read or answered once, and
  the model is loaded once); upstream the model and the seeds' perturbations;
- scores (model, dataset): upstream the seeds' splits (labels, joined last), features and baselines.

Perturbations, baselines and scores write one folder per seed inside the job's folder (``<key>/seed-<s>/``):
:func:`mialab.pipeline.plan.seed_part` addresses it, so consumers read a seed's table as before.
"""

from __future__ import annotations

import functools

from mialab.lara.baselines import response_columns
from mialab.lara.detection import WINDOWS
from mialab.lara.metrics import METRIC_NAMES
from mialab.pipeline.columns import Columns
from mialab.pipeline.config import ConfigError, check_generation, check_names
from mialab.pipeline.methods import MethodPlan
from mialab.pipeline.plan import Stage, seed_part

PERTURBATION_KEYS = ("question", "controls", "neighbours", "blank", "paraphrase", "llm")
# the score columns' prefixes (mialab.lara.stages): the detection score fitted on held-out or in-set non-members
PREFIXES = {"held_out": "lara", "in_set": "lara_in_set"}
GENERATED = ("recall", "cdd", "self_critique")  # the baselines of mialab.lara.stages.lara_baselines besides responses
MODEL_STAGES = ("features", "baselines")


class LaRAPlan(MethodPlan):
    """LaRA stage instances of a config (``config['lara']``; absent: nothing to run)."""

    section = "lara"

    def check(self) -> None:
        """Cross-references of the ``lara`` section; every (model, dataset) must be in the results table; the
        instruction model (``llm``) and its backend options load no code."""
        if "llm" in self.spec:
            llm = self.spec["llm"]
            check_generation("lara.llm.backend_options", llm["engine"], llm["backend_options"],
                             model=("lara.llm.model", llm["model"]))
        keys = ("lara.targets",) * 2 if "targets" in self.spec else ("lara.models", "lara.datasets")
        check_names(keys[0], self.models(), self.config["models"], "model")
        check_names(keys[1], self.datasets(), self.config["datasets"], "dataset")
        evaluated = set(self.plan.evaluated_pairs(self.datasets()))
        for m, d in self.pairs():
            if (m, d) not in evaluated:
                raise ConfigError(f"lara: model {m!r} is not evaluated on dataset {d!r} (see models.{m}.datasets)")

    def pairs(self) -> list[tuple[str, str]]:
        """(model, dataset) pairs LaRA runs on: ``targets``, else ``models`` x ``datasets``."""
        if not self.spec:
            return []
        if "targets" in self.spec:
            return [(t["model"], t["dataset"]) for t in self.spec["targets"]]
        return [(m, d) for d in self.spec["datasets"] for m in self.spec["models"]]

    def datasets(self) -> list[str]:
        return list(dict.fromkeys(d for _, d in self.pairs()))

    def columns(self) -> list[Columns]:
        """LaRA's score columns (:mod:`mialab.pipeline.columns`; the grammar of :mod:`mialab.lara.stages`): the
        detection score, its ablations and LaRA + Self-Critique per beta under the prefix of
        ``lara.detection.reference``, the output-level baselines under ``lara/`` (a model of under 4 layers
        writes no early / mid column)."""
        key = "lara.detection.reference, lara.betas, lara.baselines.responses.min_k"
        if not self.spec:
            return [Columns(p, f"{p}(/.+)?", (), key, ()) for p in PREFIXES.values()]
        prefix = PREFIXES[self.spec["detection"]["reference"]]
        detection = [prefix, *(f"{prefix}/{v}" for m in METRIC_NAMES for v in (m, f"no_{m}")),
                     *(f"{prefix}/{w}" for w in WINDOWS), *(f"{prefix}/lara+sc@{b:g}" for b in self.spec["betas"])]
        baselines = [f"lara/{c}" for c in (*GENERATED, *response_columns(self.spec["baselines"]["responses"]["min_k"]))]
        return [Columns(p, f"{p}(/.+)?", tuple(c for c in [*detection, *baselines] if c.split("/")[0] == p), key,
                        tuple(self.pairs())) for p in PREFIXES.values()]

    def score_providers(self) -> list:
        return [self.scores_file]

    def targets(self) -> list[str]:
        """The report of every LaRA dataset."""
        return [path for d in self.datasets() for path in self.report_outputs(d).values()]

    def models(self) -> list[str]:
        return list(dict.fromkeys(m for m, _ in self.pairs()))

    @functools.lru_cache(maxsize=None)
    def perturbation_run(self, dataset: str) -> Stage:
        """The perturbation job of a dataset: every seed's table (model-free, shared by every model)."""
        seeds = self.plan.seeds()
        return self.plan.stage("lara/perturbations", {"dataset": dataset}, {
            "dataset": dataset, "seeds": seeds, "config": self.perturbation_config(),
            "upstream": {"pool": self.plan.pool(dataset).key,
                         "splits": {str(s): self.plan.split(dataset, s).key for s in seeds}},
        })

    def perturbations(self, dataset: str, seed: int) -> Stage:
        """Seed ``seed``'s part of :meth:`perturbation_run`."""
        return seed_part(self.perturbation_run(dataset), seed)

    def perturbation_config(self) -> dict:
        """The slice of the ``lara`` section the perturbation stage reads."""
        return {k: self.spec[k] for k in PERTURBATION_KEYS if k in self.spec}   # llm: only when configured

    @functools.lru_cache(maxsize=None)
    def model_run(self, stage: str, model: str, dataset: str) -> Stage:
        """The ``features`` or ``baselines`` job of a (model, dataset): every seed at once."""
        if stage not in MODEL_STAGES:
            raise ValueError(f"unknown LaRA model stage {stage!r}; known: {', '.join(MODEL_STAGES)}")
        seeds = self.plan.seeds()
        return self.plan.stage(f"lara/{stage}", {"model": model, "dataset": dataset}, {
            "model": model, "dataset": dataset, "seeds": seeds, "config": self.spec[stage],
            "upstream": {"model": self.plan.model(model).key,
                         "perturbations": self.perturbation_run(dataset).key},
        })

    @functools.lru_cache(maxsize=None)
    def score_run(self, model: str, dataset: str) -> Stage:
        """The ``scores`` job of a (model, dataset): every seed's score table."""
        seeds = self.plan.seeds()
        return self.plan.stage("lara/scores", {"model": model, "dataset": dataset}, {
            "model": model, "dataset": dataset, "seeds": seeds,
            "config": {"detection": self.spec["detection"], "betas": self.spec["betas"]},
            "upstream": {"splits": {str(s): self.plan.split(dataset, s).key for s in seeds},
                         **{s: self.model_run(s, model, dataset).key for s in MODEL_STAGES}},
        })

    def scores(self, model: str, dataset: str, seed: int) -> Stage:
        """Seed ``seed``'s part of :meth:`score_run`."""
        return seed_part(self.score_run(model, dataset), seed)

    def scores_file(self, model: str, dataset: str, seed: int) -> str | None:
        """The score table of a (model, dataset, seed) LaRA runs on, else None (a SCORE_PROVIDER)."""
        if (model, dataset) not in self.pairs():
            return None
        return self.scores(model, dataset, int(seed)).path("scores.parquet")

    def runs(self, dataset: str, seeds: list[int]) -> list[tuple[str, int]]:
        """(model, seed) of every score table of ``dataset``."""
        return [(m, int(s)) for m, d in self.pairs() if d == dataset for s in seeds]

    def report_outputs(self, dataset: str) -> dict[str, str]:
        return {name: self.plan.output("lara", "report", dataset, name)
                for name in ("lara.md", "lara.csv", "layers.png")}
