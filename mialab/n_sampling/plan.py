"""N-Sampling's content-addressed stage instances for a config (``rules/n_sampling.smk``), built with
:meth:`mialab.pipeline.plan.Plan.stage`. Pure: reads the config, runs nothing.

N-Sampling (config ``n_sampling``; absent = not run), one job per (model, dataset) of ``targets`` and
stage, over every seed (a table per seed in ``<key>/seed-<s>/``):
- rollouts: upstream the model and the splits; the dataset's task, N, backend, and each seed's sampling
  (every evaluation seed samples its own rollouts);
- scores: upstream the rollouts and the splits (labels joined last); the metric settings.

The plan reads a config validated against ``schemas/config.schema.yaml`` (defaults filled in).
"""

from __future__ import annotations

import functools

from mialab.n_sampling.tasks import Task, known_templates, rollout_seed
from mialab.pipeline.columns import Columns, listed
from mialab.pipeline.config import ConfigError, check_generation
from mialab.pipeline.methods import MethodPlan
from mialab.pipeline.plan import Stage, seed_part

METHOD = "n_sampling"  # its score columns' prefix


def targets_of(section: dict | None) -> list[tuple[str, str]]:
    """(model, dataset) pairs a section's ``targets`` name, in config order."""
    return [(t["model"], t["dataset"]) for t in section["targets"]] if section else []


class NSamplingPlan(MethodPlan):
    """N-Sampling stage instances (``config['n_sampling']``)."""

    section = "n_sampling"

    def check(self) -> None:
        """Cross-references: every target is evaluated, has a task with a known template; chat models exist;
        the backend options (ADRA's evaluation rollouts' too) load no code."""
        check_generation("n_sampling.backend_options", self.spec["backend"], self.spec["backend_options"])
        models, evaluated = self.config["models"], set(self.plan.evaluated_pairs())
        for m, d in self.pairs():
            if m not in models:
                raise ConfigError(f"n_sampling.targets: unknown model {m!r}; configured: {', '.join(models)}")
            if (m, d) not in evaluated:
                raise ConfigError(f"n_sampling.targets: model {m!r} is not evaluated on dataset {d!r} "
                                  f"(unknown dataset, or see models.{m}.datasets)")
            if d not in self.spec["tasks"]:
                raise ConfigError(f"n_sampling.tasks: no task for dataset {d!r} (a target of n_sampling)")
        for d, task in self.spec["tasks"].items():
            if task["template"] not in known_templates():
                raise ConfigError(f"n_sampling.tasks.{d}.template: unknown template {task['template']!r}; "
                                  f"known: {', '.join(known_templates())}")
        for m in self.spec["chat_models"]:
            if m not in models:
                raise ConfigError(f"n_sampling.chat_models: unknown model {m!r}; configured: {', '.join(models)}")
        if self.spec["chat_models"] and self.spec["prompt_format"] == "verl":
            raise ConfigError("n_sampling.chat_models: read only with n_sampling.prompt_format chat_models (verl "
                              "renders every model through its own chat template, or its fallback template)")
        n_min, n_max = self.spec["metrics"]["n_min"], self.spec["metrics"]["n_max"]
        if n_max is not None and n_min > n_max:
            raise ConfigError(f"n_sampling.metrics.n_min: {n_min} is more than n_max {n_max}: no n-gram length is "
                              "left to compare")
        primary, metrics = self.spec["primary_metric"], self.metric_columns(None)
        if primary not in metrics:
            raise ConfigError(f"n_sampling.primary_metric: {primary!r} is not a metric the attacks score under "
                              f"n_sampling.metrics (<metric>@<aon|bon>): {listed(metrics)}")

    def pairs(self) -> list[tuple[str, str]]:
        return targets_of(self.spec)

    def metric_columns(self, method: str | None) -> list[str]:
        """The score columns an attack ``method`` writes under ``n_sampling.metrics`` (every metric,
        aggregated over the N rollouts each way: ``<method>/<metric>@<agg>``; no method: ``<metric>@<agg>``)."""
        from mialab.n_sampling.attack import metric_names
        from mialab.n_sampling.evaluation import AGGREGATIONS

        prefix = f"{method}/" if method else ""
        metrics = metric_names(self.spec["metrics"]["embedding_model"])
        return [f"{prefix}{m}@{how}" for how in AGGREGATIONS for m in metrics]

    def columns(self) -> list[Columns]:
        """N-Sampling's score columns (:mod:`mialab.pipeline.columns`)."""
        return [Columns(METHOD, f"{METHOD}/.+", tuple(self.metric_columns(METHOD)) if self.spec else (),
                        "n_sampling.metrics", tuple(self.pairs()))]

    def score_providers(self) -> list:
        return [self.scores_file]

    def datasets(self) -> list[str]:
        return list(dict.fromkeys(d for _, d in self.pairs()))

    def task(self, dataset: str) -> Task:
        return Task.from_config(self.spec["tasks"][dataset])

    def prompt_format(self, model: str) -> str:
        """How ``model``'s prompts are rendered (:data:`mialab.lm.prompts.PROMPT_FORMATS`): ``verl`` under
        ``prompt_format: verl``; else ``chat`` for the ``chat_models``, ``plain`` for the others."""
        if self.spec["prompt_format"] == "verl":
            return "verl"
        return "chat" if model in self.spec["chat_models"] else "plain"

    def sampling(self, seed: int) -> dict:
        """SamplingConfig fields of N-Sampling's rollouts for evaluation seed ``seed`` (no max_new_tokens)."""
        s = self.spec["sampling"]
        return {"n": self.spec["n"], "temperature": s["temperature"], "top_p": s["top_p"], "top_k": s["top_k"],
                "seed": rollout_seed(s["seed"], seed)}

    def generation(self) -> dict:
        """The backend slice of the config (it determines the samples)."""
        return {"backend": self.spec["backend"], "backend_options": self.spec["backend_options"]}

    @functools.lru_cache(maxsize=None)
    def rollout_run(self, model: str, dataset: str) -> Stage:
        """The rollouts job of a target: every seed's split, each sampled under its own seed, one model load."""
        seeds = self.plan.seeds()
        return self.plan.stage("n_sampling/rollouts", {"model": model, "dataset": dataset}, {
            "model": model, "dataset": dataset, "seeds": seeds,
            "config": {"task": self.spec["tasks"][dataset], "prompt_format": self.prompt_format(model),
                       "sampling": {str(s): self.sampling(s) for s in seeds}, **self.generation()},
            "upstream": {"model": self.plan.model(model).key,
                         "splits": {str(s): self.plan.split(dataset, s).key for s in seeds}},
        })

    def rollouts(self, model: str, dataset: str, seed: int) -> Stage:
        """Seed ``seed``'s part of :meth:`rollout_run`."""
        return seed_part(self.rollout_run(model, dataset), seed)

    @functools.lru_cache(maxsize=None)
    def score_run(self, model: str, dataset: str) -> Stage:
        """The scores job of a target: every seed's rollouts, one embedding-model load."""
        seeds = self.plan.seeds()
        return self.plan.stage("n_sampling/scores", {"model": model, "dataset": dataset}, {
            "model": model, "dataset": dataset, "seeds": seeds, "config": self.metrics_config(dataset),
            "upstream": {"rollouts": self.rollout_run(model, dataset).key,
                         "splits": {str(s): self.plan.split(dataset, s).key for s in seeds}},
        })

    def scores(self, model: str, dataset: str, seed: int) -> Stage:
        """Seed ``seed``'s part of :meth:`score_run`."""
        return seed_part(self.score_run(model, dataset), seed)

    def metrics_config(self, dataset: str) -> dict:
        """What scoring rollouts reads: the metric settings, N and the task's assistant-prefix rule."""
        task = self.spec["tasks"][dataset]
        return {**self.spec["metrics"], "n": self.spec["n"], "ratio": task["assistant_prefix_ratio"],
                "min_words": task["assistant_prefix_min_words"]}

    def scores_file(self, model: str, dataset: str, seed: int) -> str | None:
        """N-Sampling's score table of a target (a SCORE_PROVIDER), else None."""
        if (model, dataset) not in self.pairs():
            return None
        return self.scores(model, dataset, int(seed)).path("scores.parquet")
