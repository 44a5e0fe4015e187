"""CalibDCD's content-addressed stage instances for a config (``rules/calibdcd.smk``), built with
:meth:`mialab.workflow.Plan.stage`. Pure: reads the config, runs nothing.

- partition (dataset, seed): upstream the seed's split;
- features (model, dataset, scope): scope ``original`` (``e0`` on every pool text) depends on the
  model and the pool only, so it is shared by every seed and survives changes of seeds, split
  sizes and partition sizes; scope ``views-seed-<s>`` (controlled views on seed s's D-cal) depends
  on that seed's partition;
- scores (model, dataset, detector, seed): upstream the split, the partition and both feature scopes.
"""

from __future__ import annotations

import functools

from mialab.calibdcd.views import ORIGINAL, controlled_views
from mialab.config import check_names
from mialab.workflow import Plan, Stage

STAGE_VERSIONS: dict[str, int] = {"partition": 1, "features": 1, "scores": 1}  # bump when a stage's output changes
LM_KEYS = ("reference_model", "key_token_model")
ORIGINAL_SCOPE = "original"


def views_scope(seed: int) -> str:
    """Name of the controlled-views feature scope of ``seed``."""
    return f"views-seed-{int(seed)}"


def scope_seed(scope: str) -> int | None:
    """The seed of a ``views-seed-<s>`` scope; ``None`` for the original scope."""
    if scope == ORIGINAL_SCOPE:
        return None
    head, _, seed = scope.rpartition("-")
    if head != "views-seed" or not seed.isdigit():
        raise ValueError(f"unknown feature scope {scope!r}; known: {ORIGINAL_SCOPE!r}, 'views-seed-<seed>'")
    return int(seed)


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
        """(model, dataset, detector, seed) of every calibration job."""
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
        if scope_seed(scope) is None:
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
        seed = scope_seed(scope)
        upstream = {"model": self.plan.model(model).key, "pool": self.plan.pool(dataset).key}
        if seed is not None:
            upstream["partition"] = self.partition(dataset, seed).key
        return self.plan.stage("calibdcd/features", STAGE_VERSIONS["features"], [model, dataset, scope], {
            "model": model, "dataset": dataset, "scope": scope, "views": self.views(model, scope),
            "config": {"generation": self.spec["generation"], "lm": self.spec["lm"],
                       "detectors": self.detector_specs(self.lm_key)},
            "upstream": upstream,
        })

    @functools.lru_cache(maxsize=None)
    def scores(self, model: str, dataset: str, detector: str, seed: int) -> Stage:
        return self.plan.stage("calibdcd/scores", STAGE_VERSIONS["scores"],
                               [model, dataset, detector, f"seed-{seed}"], {
            "model": model, "dataset": dataset, "detector": detector, "seed": int(seed),
            "config": {k: self.spec[k] for k in ("variants", "tau", "tolerance")},
            "upstream": {"split": self.plan.split(dataset, int(seed)).key,
                         "partition": self.partition(dataset, int(seed)).key,
                         "original": self.features(model, dataset, ORIGINAL_SCOPE).key,
                         "views": self.features(model, dataset, views_scope(seed)).key},
        })
