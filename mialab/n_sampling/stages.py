"""What each N-Sampling workflow job does, as plain functions of tables and paths (ADRA's evaluation
rollouts and scores reuse them).

- :func:`generate`: N rollouts per candidate of each split from a model;
- :func:`score`: per-rollout metrics and the attack's score table.
"""

from __future__ import annotations

import pandas as pd

from mialab.lm.engine import SamplingConfig, run_rollouts_many
from mialab.n_sampling.attack import rollout_metrics, score_table
from mialab.n_sampling.tasks import Task, fitted_split


def unlabelled(split: pd.DataFrame) -> pd.DataFrame:
    """The candidates of a split without their membership labels (what an attack may see)."""
    return split.drop(columns=["label"])


def generate(model_path: str, splits: list[pd.DataFrame], task: Task, *, prompt_format: str, samplings: list[dict],
             backend: str, backend_options: dict, trust_remote_code: bool = False, parts: list | None = None,
             model_key=None) -> list[pd.DataFrame]:
    """Rollouts (rollout schema) of every candidate of each split, split ``i`` sampled with ``samplings[i]``
    (SamplingConfig fields): the task's prompts, one engine start for all splits; resumable in ``parts``
    (one folder per split; ``model_key``: see :func:`mialab.lm.engine.run_rollouts_many`).

    Each split gets the rollouts it would get alone (the hf backend seeds every batch from its
    sampling seed): jobs over several seeds only save the model loads.
    """
    from mialab.lm.loading import load_tokenizer

    tokenizer = load_tokenizer(model_path, padding_side="left", trust_remote_code=trust_remote_code)
    return run_rollouts_many([fitted_split(unlabelled(split), tokenizer, task, prompt_format=prompt_format)
                              for split in splits],
                             [SamplingConfig(**s, max_new_tokens=task.max_new_tokens) for s in samplings],
                             model=model_path, backend=backend, template=task.template_text(),
                             prompt_format=prompt_format,
                             assistant_prefix_ratio=task.assistant_prefix_ratio,
                             assistant_prefix_min_words=task.assistant_prefix_min_words,
                             backend_options=backend_options, trust_remote_code=trust_remote_code, parts=parts,
                             model_key=model_key)


def score(rollouts: pd.DataFrame, split: pd.DataFrame, method: str, metrics: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-rollout metrics, score table) of an attack; ``metrics`` = the scores stage config."""
    m = dict(metrics)
    per_rollout = rollout_metrics(rollouts, split, ratio=m.pop("ratio"), min_words=m.pop("min_words"), n=m.pop("n"),
                                  **m)
    return per_rollout, score_table(per_rollout, split, method)
