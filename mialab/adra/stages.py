"""What each N-Sampling / ADRA workflow job does, as plain functions of tables and paths.

- :func:`generate`: N rollouts per candidate of each split from a model (N-Sampling, ADRA evaluation);
- :func:`policy_rollouts`: the same from a trained policy (a LoRA snapshot merged into its model);
- :func:`score`: per-rollout metrics and the attack's score table;
- :func:`train`: ADRA / ADRA+ / SFT-ablation training on the unlabelled candidates of a split.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from mialab.adra.attack import rollout_metrics, score_table
from mialab.adra.rewards import adra_reward, membership_weights
from mialab.adra.tasks import Task, fitted_split
from mialab.generation.engine import SamplingConfig, run_rollouts_many
from mialab.rl.grpo import GRPOSettings, export_checkpoint


def unlabelled(split: pd.DataFrame) -> pd.DataFrame:
    """The candidates of a split without their membership labels (what an attack may see)."""
    return split.drop(columns=["label"])


def generate(model_path: str, splits: list[pd.DataFrame], task: Task, *, chat: bool, samplings: list[dict],
             backend: str, backend_options: dict, trust_remote_code: bool = False) -> list[pd.DataFrame]:
    """Rollouts (rollout schema) of every candidate of each split, split ``i`` sampled with ``samplings[i]``
    (SamplingConfig fields): the task's prompts, one engine start for all splits.

    Each split gets the rollouts it would get alone (the hf backend seeds every batch from its
    sampling seed): jobs over several seeds only save the model loads.
    """
    from mialab.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model_path, padding_side="left", trust_remote_code=trust_remote_code)
    return run_rollouts_many([fitted_split(unlabelled(split), tokenizer, task, chat=chat) for split in splits],
                             [SamplingConfig(**s, max_new_tokens=task.max_new_tokens) for s in samplings],
                             model=model_path, backend=backend, template=task.template_text(), chat=chat,
                             assistant_prefix_ratio=task.assistant_prefix_ratio, backend_options=backend_options,
                             trust_remote_code=trust_remote_code)


def policy_rollouts(model_path: str, snapshot: str | os.PathLike | None, splits: list[pd.DataFrame], task: Task,
                    *, trust_remote_code: bool = False, **generation) -> list[pd.DataFrame]:
    """:func:`generate` from a policy snapshot (its LoRA adapter merged into ``model_path`` in a temporary
    folder), or from ``model_path`` itself when ``snapshot`` is None (the untrained policy)."""
    if snapshot is None:
        return generate(model_path, splits, task, trust_remote_code=trust_remote_code, **generation)
    with tempfile.TemporaryDirectory(prefix="adra-policy-") as tmp:
        export_checkpoint(snapshot, tmp, init=model_path, trust_remote_code=trust_remote_code)
        return generate(tmp, splits, task, trust_remote_code=trust_remote_code, **generation)


def score(rollouts: pd.DataFrame, split: pd.DataFrame, method: str, metrics: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-rollout metrics, score table) of an attack; ``metrics`` = the scores stage config."""
    m = dict(metrics)
    per_rollout = rollout_metrics(rollouts, split, ratio=m.pop("ratio"), n=m.pop("n"), **m)
    return per_rollout, score_table(per_rollout, split, method)


def train(model_path: str, split: pd.DataFrame, config: dict, work_dir: str | os.PathLike,
          snapshot_dir: str | os.PathLike, *, baseline_scores: pd.DataFrame | None = None,
          device: str = "auto", trust_remote_code: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train one variant (``config`` = the train stage's config) on the split's unlabelled candidates.

    Returns (training set, trainer log). ``baseline_scores`` (ADRA+ only) is a passive baseline's
    score table of the same candidates; only its ``id`` and weight column are read.
    """
    from mialab.adra.training import train_policy, training_set  # TRL/peft: only the training jobs pay for them
    from mialab.models.loading import load_tokenizer

    variant = config["variant"]
    candidates = unlabelled(split)
    task = Task.from_config(config["task"])
    settings = GRPOSettings.from_config(config["settings"])
    weights, reward = None, None
    if variant == "adra_plus":
        if baseline_scores is None:
            raise ValueError("adra_plus needs the passive baseline's scores of the candidates")
        weights = membership_weights(baseline_scores, config["contrastive"]["baseline"], list(candidates["id"]))
    if variant != "adra_sft":
        reward = adra_reward(**config["reward"])
    data = training_set(candidates, load_tokenizer(model_path, trust_remote_code=trust_remote_code), task, variant, chat=config["chat"],
                        seed=settings.seed, distractors=config.get("contrastive", {}).get("distractors", 0),
                        random_suffixes=config.get("random_suffixes", 0), weights=weights,
                        replace=config.get("distractor_sampling") == "with_replacement")
    Path(snapshot_dir).mkdir(parents=True, exist_ok=True)
    log = train_policy(model_path, data.drop(columns=["id"]), variant, settings, work_dir, reward,
                       snapshot_steps=config["snapshots"], snapshot_dir=snapshot_dir, device=device,
                       trust_remote_code=trust_remote_code)
    return data, log
