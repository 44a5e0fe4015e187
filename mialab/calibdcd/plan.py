"""CalibDCD's content-addressed stage instances for a config (``rules/calibdcd.smk``), built with
:meth:`mialab.workflow.Plan.stage`. Pure: reads the config, runs nothing.

- partition (dataset, seed): upstream the seed's split;
- features (model, dataset, scope): scope ``original`` (``e0`` on every pool text) depends on the
  model and the pool only, so it is shared by every seed and survives changes of seeds, split
  sizes and partition sizes; scope ``views`` (controlled views on the D-cal texts of every seed,
  each text once) depends on the seeds' partitions;
- scores (model, dataset): one job calibrates every detector on every seed (upstream the splits,
  the partitions and both feature scopes); a (detector, seed)'s tables sit in
  ``<key>/<detector>/seed-<s>/`` (:meth:`CalibDCDPlan.scores`).
"""

from __future__ import annotations

import functools
import os

from mialab.calibdcd.views import ORIGINAL, controlled_views
from mialab.config import check_names
from mialab.workflow import Plan, Stage, seed_part

STAGE_VERSIONS: dict[str, int] = {"partition": 1, "features": 2, "scores": 2}  # bump when a stage's output changes
LM_KEYS = ("reference_model", "key_token_model")
ORIGINAL_SCOPE, VIEWS_SCOPE = "original", "views"
SCOPES = (ORIGINAL_SCOPE, VIEWS_SCOPE)


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ValueError(f"unknown feature scope {scope!r}; known: {', '.join(SCOPES)}")
    return scope


class CalibDCDPlan:
    """CalibDCD stage instances of a config (``config['calibdcd']``; absent: nothing to run)."""

    def __init__(self, plan: Plan, config: dict):
        self.plan = plan
        self.config = config
        self.spec = config.get("calibdcd")
        self.check()

    def check(self) -> None:
        """Cross-references of the ``calibdcd`` section, with errors naming the key."""
        if not self.spec:
            return
        check_names("calibdcd.models", self.spec["models"], self.config["models"], "model")
        check_names("calibdcd.datasets", self.spec.get("datasets", []), self.config["datasets"], "dataset")

    def pairs(self) -> list[tuple[str, str]]:
        """(model, dataset) pairs CalibDCD runs on: its models' evaluated pairs among its datasets."""
        if not self.spec:
            return []
        pairs = self.plan.evaluated_pairs(self.spec.get("datasets") or self.plan.dataset_names())
        return [(m, d) for m, d in pairs if m in self.spec["models"]]

    def detectors(self) -> list[str]:
        return list(self.spec["detectors"]) if self.spec else []

    def runs(self, seeds: list[int]) -> list[tuple[str, str, str, int]]:
        """(model, dataset, detector, seed) of every calibration (a score table each)."""
        return [(m, d, det, int(s)) for m, d in self.pairs() for det in self.detectors() for s in seeds]

    # -- language models besides the target ------------------------------------------------------
    def lm_path(self, name: str) -> str:
        """A reference / key-token LM: a configured model's folder, else the local path or hub id as given."""
        return self.plan.model_path(name) if name in self.config["models"] else name

    def lm_key(self, name: str) -> dict:
        """What identifies that LM in a key: the configured model's key, else the path or hub id."""
        return {"model": name, "key": self.plan.model(name).key} if name in self.config["models"] else {"path": name}

    def lm_models(self) -> list[str]:
        """Configured models used as reference / key-token LMs (their folders are job inputs)."""
        names = [spec.get(k) for spec in self.spec["detectors"].values() for k in LM_KEYS]
        return [n for n in dict.fromkeys(names) if n in self.config["models"]]

    def detector_specs(self, resolve) -> dict[str, dict]:
        """The detectors' config with each LM name replaced by ``resolve(name)``."""
        return {det: {k: resolve(v) if k in LM_KEYS else v for k, v in spec.items()}
                for det, spec in self.spec["detectors"].items()}

    def views(self, model: str, scope: str) -> list[str]:
        """``e0`` alone for the original scope, else the model family's ten controlled views."""
        if check_scope(scope) == ORIGINAL_SCOPE:
            return [ORIGINAL]
        return controlled_views(self.spec["models"][model]["family"])

    # -- stages ------------------------------------------------------------------------------------
    @functools.lru_cache(maxsize=None)
    def partition(self, dataset: str, seed: int) -> Stage:
        return self.plan.stage("calibdcd/partitions", STAGE_VERSIONS["partition"], [dataset, f"seed-{seed}"], {
            "dataset": dataset, "seed": int(seed), "config": self.spec["partition"],
            "upstream": {"split": self.plan.split(dataset, int(seed)).key},
        })

    @functools.lru_cache(maxsize=None)
    def features(self, model: str, dataset: str, scope: str) -> Stage:
        upstream = {"model": self.plan.model(model).key, "pool": self.plan.pool(dataset).key}
        if check_scope(scope) == VIEWS_SCOPE:
            upstream["partitions"] = {str(s): self.partition(dataset, s).key for s in self.plan.seeds()}
        return self.plan.stage("calibdcd/features", STAGE_VERSIONS["features"], [model, dataset, scope], {
            "model": model, "dataset": dataset, "scope": scope, "views": self.views(model, scope),
            "config": {"generation": self.spec["generation"], "lm": self.spec["lm"],
                       "detectors": self.detector_specs(self.lm_key)},
            "upstream": upstream,
        })

    @functools.lru_cache(maxsize=None)
    def score_run(self, model: str, dataset: str) -> Stage:
        """The calibration job of a (model, dataset): every detector, every seed."""
        seeds = self.plan.seeds()
        return self.plan.stage("calibdcd/scores", STAGE_VERSIONS["scores"], [model, dataset], {
            "model": model, "dataset": dataset, "detectors": self.detectors(), "seeds": seeds,
            "config": {k: self.spec[k] for k in ("variants", "tau", "tolerance")},
            "upstream": {"splits": {str(s): self.plan.split(dataset, s).key for s in seeds},
                         "partitions": {str(s): self.partition(dataset, s).key for s in seeds},
                         "original": self.features(model, dataset, ORIGINAL_SCOPE).key,
                         "views": self.features(model, dataset, VIEWS_SCOPE).key},
        })

    def scores(self, model: str, dataset: str, detector: str, seed: int) -> Stage:
        """A (detector, seed)'s part of :meth:`score_run`: ``<key>/<detector>/seed-<s>/``."""
        run = self.score_run(model, dataset)
        if detector not in run.manifest["detectors"]:
            raise KeyError(f"detector {detector!r} is not calibrated; configured: {run.manifest['detectors']}")
        return seed_part(Stage(run.stage, run.key, os.path.join(run.dir, detector), run.manifest), seed)
