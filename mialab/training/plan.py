"""The GRPO runs of a config (``rules/models.smk``): ``kind: rl`` models grouped by run.

Models whose entries differ only in ``epoch``, ``reference`` or ``datasets`` are checkpoints of one
run (:meth:`mialab.pipeline.plan.Plan.rl_run`), trained epoch by epoch into ``results/rl/<key>/epoch-<e>/``:
epoch 1 from the run's ``init`` model, epoch ``e`` from the trainer checkpoint of epoch ``e - 1``.
"""

from __future__ import annotations

from mialab.pipeline.plan import EPOCH_PART, Plan


class RLPlan:
    """Run key -> configured ``kind: rl`` model of that run, and each epoch job's inputs."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.runs: dict[str, str] = {}
        for name, spec in plan.config["models"].items():
            if spec["kind"] == "rl":
                self.runs.setdefault(plan.rl_run(name).key, name)

    def model(self, key: str) -> str:
        """A model of run ``key``; a key no configured model addresses is stale."""
        try:
            return self.runs[key]
        except KeyError:
            raise KeyError(f"{self.plan.pattern('rl', key=key)}: no configured rl model belongs to this run; "
                           f"current runs: {', '.join(self.runs) or 'none'} (request outputs through the target "
                           "rules)") from None

    def spec(self, key: str) -> dict:
        return self.plan.model_spec(self.model(key))

    def manifest(self, key: str, epoch: int) -> dict:
        return {**self.plan.rl_run(self.model(key)).manifest, "epoch": int(epoch)}

    def member_split(self, key: str) -> list[str]:
        """The split whose members alone the run trains on (``members.split_seed``), else nothing."""
        members = self.spec(key)["members"]
        if "split_seed" not in members:
            return []
        return [self.plan.split(members["dataset"], members["split_seed"]).path("split.parquet")]

    def previous(self, key: str, epoch: int) -> list[str]:
        """The trainer checkpoint epoch ``epoch`` resumes from (none for the first epoch)."""
        self.model(key)
        return [self.plan.pattern("rl", EPOCH_PART, "trainer", key=key, epoch=int(epoch) - 1)] if int(epoch) > 1 else []
