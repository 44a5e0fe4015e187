"""ADRA's content-addressed stage instances for a config (``rules/adra.smk``), built with
:meth:`mialab.pipeline.plan.Plan.stage` over :class:`mialab.n_sampling.plan.NSamplingPlan`. Pure.

ADRA (config ``adra``; needs ``n_sampling``, whose tasks, N and metrics it shares), per target:
- train (model, dataset, variant, seed): upstream the model, the split and, for ADRA+, the passive
  baseline scores of the same (model, dataset, seed) that give its membership weights;
- rollouts / scores (model, dataset, seed, policy): a policy is ``init`` (the untrained model, step 0,
  shared by every variant), ``<variant>-step<k>`` (an intermediate checkpoint) or ``<variant>-final``.
  Only the final policies join the results table; the report plots AUROC against the step.
- report (dataset): every N-Sampling dataset gets one (top-5 summaries of N-Sampling, ADRA where it
  runs, and the best passive baseline).

The plans read a config validated against ``schemas/config.schema.yaml`` (defaults filled in).
"""

from __future__ import annotations

import functools
import re

from mialab.adra import FINAL, VARIANTS
from mialab.n_sampling.plan import NSamplingPlan, targets_of
from mialab.n_sampling.tasks import rollout_seed
from mialab.pipeline.columns import Columns
from mialab.pipeline.config import ConfigError, check_generation
from mialab.pipeline.methods import MethodPlan
from mialab.pipeline.plan import Stage
from mialab.scoring.baselines import score_columns

INIT = "init"
# a policy's name, unanchored (rules/adra.smk's wildcard constraint): groups 1 and 2 its variant and step
POLICY_GRAMMAR = rf"{INIT}|({'|'.join(VARIANTS)})-(?:step([1-9]\d*)|{FINAL})"
POLICY = re.compile(POLICY_GRAMMAR)


class ADRAPlan(MethodPlan):
    """ADRA / ADRA+ / SFT-ablation stage instances (``config['adra']``), over N-Sampling's."""

    section = "adra"

    def __init__(self, ns: NSamplingPlan, config: dict):
        self.ns = ns
        super().__init__(ns.plan, config)

    @classmethod
    def build(cls, plan, config: dict, plans) -> ADRAPlan:
        return cls(plans["n_sampling"], config)

    def check(self) -> None:
        """Cross-references: targets are N-Sampling targets; checkpoint steps are saved; the weight baseline is scored;
        the judge model and its backend options load no code (the evaluation rollouts': NSamplingPlan)."""
        judge = self.spec["reward"].get("judge")
        if judge:
            check_generation("adra.reward.judge.backend_options", judge["engine"], judge["backend_options"],
                             model=("adra.reward.judge.model", judge["model"]))
        ns_pairs = set(self.ns.pairs())
        for m, d in self.pairs():
            if (m, d) not in ns_pairs:
                raise ConfigError(f"adra.targets: ({m}, {d}) is not an n_sampling target (ADRA shares its task, "
                                  "N and metrics, and is compared with it)")
        save, last = self.spec["train"]["save_steps"], self.spec["train"]["max_steps"]
        for s in self.spec["eval"]["steps"]:
            if s >= last:
                raise ConfigError(f"adra.eval.steps: step {s} is not before adra.train.max_steps ({last}): no "
                                  "intermediate checkpoint holds it (the final policy is always evaluated)")
            if s and s % save:
                raise ConfigError(f"adra.eval.steps: step {s} is not a multiple of adra.train.save_steps ({save}), "
                                  "so no checkpoint holds it")
        n = self.ns.spec["n"]
        if self.spec["train"]["batch_size"] % n:
            raise ConfigError(f"adra.train.batch_size ({self.spec['train']['batch_size']}) must be a multiple of "
                              f"n_sampling.n ({n}), the rollouts per prompt")
        targets = {d for _, d in self.pairs()}
        for d in sorted(targets):
            own = self.dataset_settings(d)
            for reward in (own["reward"], own["plus_reward"]):
                if reward["metric"] == "embedding" and not reward["embedding_model"]:
                    raise ConfigError(f"adra.reward.embedding_model: the embedding reward of dataset {d!r} needs a "
                                      "sentence-transformers model")
                if reward["metric"] == "judge" and "judge" not in reward:
                    raise ConfigError(f"adra.reward.judge: the judge reward of dataset {d!r} needs a judge model "
                                      "(adra.reward.judge.model)")
        for d in self.spec["datasets"]:
            if d not in targets:
                raise ConfigError(f"adra.datasets: {d!r} is not the dataset of an adra target "
                                  f"({', '.join(sorted(targets))})")
        if "adra_plus" in self.spec["variants"]:
            scoring = self.config["scoring"]
            for m, d in self.pairs():
                column = self.dataset_settings(d)["contrastive"]["baseline"]
                written = score_columns(scoring, reference=self.plan.reference_of(m) is not None)
                if column not in written:
                    key = f"adra.datasets.{d}" if "contrastive" in self.spec["datasets"].get(d, {}) else "adra"
                    raise ConfigError(f"{key}.contrastive.baseline: {column!r} is not a score of scoring.methods "
                                      f"{scoring['methods']} with scoring.k {scoring['k']} on {m} "
                                      f"({', '.join(written)}), which give ADRA+'s membership weights on {d}; name "
                                      "one of them, or add its method or k")

    def pairs(self) -> list[tuple[str, str]]:
        return targets_of(self.spec)

    def columns(self) -> list[Columns]:
        """The score columns of ADRA's policies in the results table (:mod:`mialab.pipeline.columns`): each
        variant's final policy, and the untrained one (``adra_init``) where step 0 is evaluated."""
        methods = [*VARIANTS, self.method(INIT)]
        running = [self.method(p) for p in self.policies() if p == INIT or p.endswith(FINAL)] if self.spec else []
        return [Columns(m, f"{re.escape(m)}/.+", tuple(self.ns.metric_columns(m)) if m in running else (),
                        "adra.variants, adra.eval.steps, n_sampling.metrics", tuple(self.pairs())) for m in methods]

    def score_providers(self) -> list:
        """Each variant's final policy's score tables, then the untrained policy's."""
        return [*[lambda model, dataset, seed, v=v: self.scores_file(v, model, dataset, seed) for v in VARIANTS],
                self.init_scores_file]

    def targets(self) -> list[str]:
        """The reconstruction report of every N-Sampling dataset."""
        return [path for d in self.report_datasets() for path in self.report_outputs(d).values()]

    def variants(self) -> list[str]:
        return list(self.spec["variants"]) if self.spec else []

    def settings(self, model: str, dataset: str, seed: int) -> dict:
        """GRPOSettings of a run: ``adra.train`` plus what ADRA shares with N-Sampling (N, sampling, lengths)."""
        task, sampling = self.ns.task(dataset), self.ns.spec["sampling"]
        return {**self.spec["train"], "num_generations": self.ns.spec["n"], "temperature": sampling["temperature"],
                "top_p": sampling["top_p"], "top_k": sampling["top_k"], "max_completion_length": task.max_new_tokens,
                "max_prompt_length": task.max_prompt_tokens, "seed": rollout_seed(self.spec["seed"], seed)}

    def dataset_settings(self, dataset: str) -> dict:
        """``reward`` (ADRA), ``plus_reward`` (ADRA+: ``contrastive.reward`` over it), ``random_suffixes`` and
        ``contrastive`` of a dataset: ``adra.datasets.<dataset>`` over the section's own values."""
        own = self.spec["datasets"].get(dataset, {})
        contrastive = {**self.spec["contrastive"], **own.get("contrastive", {})}
        reward = {**self.spec["reward"], **own.get("reward", {})}
        plus = {**self.spec["contrastive"].get("reward", {}), **own.get("contrastive", {}).get("reward", {})}
        contrastive.pop("reward", None)
        return {"reward": reward, "plus_reward": {**reward, **plus},
                "random_suffixes": own.get("random_suffixes", self.spec["random_suffixes"]), "contrastive": contrastive}

    def uses_baseline(self, variant: str) -> bool:
        return variant == "adra_plus"

    @functools.lru_cache(maxsize=None)
    def train(self, model: str, dataset: str, variant: str, seed: int) -> Stage:
        upstream = {"model": self.plan.model(model).key, "split": self.plan.split(dataset, seed).key}
        config = {"variant": variant, "task": self.ns.spec["tasks"][dataset],
                  "prompt_format": self.ns.prompt_format(model),
                  "settings": self.settings(model, dataset, seed), "snapshots": self.snapshot_steps()}
        own = self.dataset_settings(dataset)
        if variant != "adra_sft":
            config["reward"] = own["plus_reward" if self.uses_baseline(variant) else "reward"]
            config["reward_reference"] = self.spec["reward_reference"]
            config["distractor_sampling"] = self.spec["distractor_sampling"]
        if variant == "adra":
            config["random_suffixes"] = own["random_suffixes"]
        if self.uses_baseline(variant):
            config["contrastive"] = own["contrastive"]
            upstream["baseline_scores"] = self.plan.scores(model, dataset, seed).key
        where = {"model": model, "dataset": dataset, "variant": variant, "seed": int(seed)}
        return self.plan.stage("adra/train", where,
                               {"model": model, "dataset": dataset, "seed": int(seed), "config": config,
                                "upstream": upstream})

    def snapshot_steps(self) -> list[int]:
        """Intermediate steps whose policies are kept for evaluation (step 0 is the untrained model)."""
        return sorted({int(s) for s in self.spec["eval"]["steps"] if s})

    def policies(self) -> list[str]:
        """Every evaluated policy of a target: ``init`` if step 0 is listed, each variant's steps and final."""
        out = [INIT] if 0 in self.spec["eval"]["steps"] else []
        for v in self.variants():
            out += [f"{v}-step{s}" for s in self.snapshot_steps()] + [f"{v}-{FINAL}"]
        return out

    @staticmethod
    def parse_policy(policy: str) -> tuple[str | None, str | None]:
        """(variant, snapshot folder name) of a policy; (None, None) for ``init``."""
        m = POLICY.fullmatch(policy)
        if not m:
            raise ValueError(f"unknown policy {policy!r}: expected {INIT}, <variant>-step<k> or <variant>-{FINAL}")
        if policy == INIT:
            return None, None
        return m[1], f"step-{m[2]}" if m[2] else FINAL

    @staticmethod
    def method(policy: str) -> str:
        """Column prefix of a policy's scores: the variant for its final policy (the results table), else
        ``adra_init`` / ``<variant>@step<k>``."""
        if policy == INIT:
            return "adra_init"
        variant, snapshot = ADRAPlan.parse_policy(policy)
        return variant if snapshot == FINAL else f"{variant}@{snapshot.replace('-', '')}"

    def sampling(self, seed: int) -> dict:
        """SamplingConfig fields of evaluation rollouts (N as N-Sampling, the eval temperature and top-p/k)."""
        e = self.spec["eval"]
        return {"n": self.ns.spec["n"], "temperature": e["temperature"], "top_p": e["top_p"], "top_k": e["top_k"],
                "seed": rollout_seed(self.spec["seed"], seed)}

    @functools.lru_cache(maxsize=None)
    def rollouts(self, model: str, dataset: str, seed: int, policy: str) -> Stage:
        variant, snapshot = self.parse_policy(policy)
        upstream = {"model": self.plan.model(model).key, "split": self.plan.split(dataset, seed).key}
        if variant:
            upstream["train"] = self.train(model, dataset, variant, seed).key
        where = {"model": model, "dataset": dataset, "seed": int(seed), "policy": policy}
        return self.plan.stage("adra/rollouts", where, {
            "model": model, "dataset": dataset, "seed": int(seed), "policy": policy, "snapshot": snapshot,
            "config": {"task": self.ns.spec["tasks"][dataset], "prompt_format": self.ns.prompt_format(model),
                       "sampling": self.sampling(seed), **self.ns.generation()},
            "upstream": upstream,
        })

    @functools.lru_cache(maxsize=None)
    def scores(self, model: str, dataset: str, seed: int, policy: str) -> Stage:
        where = {"model": model, "dataset": dataset, "seed": int(seed), "policy": policy}
        return self.plan.stage("adra/scores", where, {
            "model": model, "dataset": dataset, "seed": int(seed), "policy": policy, "method": self.method(policy),
            "config": self.ns.metrics_config(dataset),
            "upstream": {"rollouts": self.rollouts(model, dataset, seed, policy).key,
                         "split": self.plan.split(dataset, seed).key},
        })

    def scores_file(self, variant: str, model: str, dataset: str, seed: int) -> str | None:
        """A variant's final-policy score table of a target (a SCORE_PROVIDER), else None."""
        if (model, dataset) not in self.pairs() or variant not in self.variants():
            return None
        return self.scores(model, dataset, int(seed), f"{variant}-{FINAL}").path("scores.parquet")

    def init_scores_file(self, model: str, dataset: str, seed: int) -> str | None:
        """The untrained policy's score table (``adra_init``, sampled as ADRA's policies: the control that
        separates RL training from the sampling temperature; a SCORE_PROVIDER) where step 0 is evaluated."""
        if (model, dataset) not in self.pairs() or INIT not in self.policies():
            return None
        return self.scores(model, dataset, int(seed), INIT).path("scores.parquet")

    def runs(self, dataset: str, seeds: list[int]) -> list[tuple[str, int, str]]:
        """(model, seed, policy) of every ADRA score table of ``dataset``."""
        if not self.spec:
            return []
        return [(m, int(s), p) for m, d in self.pairs() if d == dataset for s in seeds for p in self.policies()]

    # -- rule inputs --------------------------------------------------------------------------
    def baseline_input(self, model: str, dataset: str, variant: str, seed: int) -> dict[str, str]:
        """adra_train's passive baseline scores (ADRA+'s membership weights), else nothing."""
        if not self.uses_baseline(variant):
            return {}
        return {"baseline": self.plan.scores(model, dataset, int(seed)).path("scores.parquet")}

    def adapters_input(self, model: str, dataset: str, seed: int, policy: str) -> dict[str, str]:
        """adra_eval's adapters folder of the run a policy comes from (nothing for the untrained model)."""
        variant, _ = self.parse_policy(policy)
        return {"adapters": self.train(model, dataset, variant, int(seed)).path("adapters")} if variant else {}

    def report_datasets(self) -> list[str]:
        """Datasets with a reconstruction report: every N-Sampling dataset (ADRA's are among them)."""
        return self.ns.datasets()

    def report_tables(self, dataset: str, seeds: list[int]) -> list[tuple[tuple[str, int], str]]:
        """((model, seed), path) of every score table adra_report reads: ADRA policies, N-Sampling, baselines."""
        out = [((m, s), self.scores(m, dataset, s, p).path("scores.parquet")) for m, s, p in self.runs(dataset, seeds)]
        for m in dict.fromkeys(m for m, d in self.ns.pairs() if d == dataset):
            out += [((m, int(s)), self.ns.scores_file(m, dataset, s)) for s in seeds]
            out += [((m, int(s)), self.plan.scores(m, dataset, int(s)).path("scores.parquet")) for s in seeds]
        return out

    def report_logs(self, dataset: str, seeds: list[int]) -> list[tuple[tuple[str, str], str]]:
        """((model, variant), path) of every training log of ``dataset`` (the report's final steps)."""
        return [((m, v), self.train(m, dataset, v, int(s)).path("log.parquet"))
                for m, d in self.pairs() if d == dataset for v in self.variants() for s in seeds]

    def report_outputs(self, dataset: str) -> dict[str, str]:
        return {name: self.plan.output("adra", "report", dataset, name)
                for name in ("adra.md", "adra.csv", "steps.png")}
