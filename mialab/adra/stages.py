"""What each ADRA workflow job does, as plain functions of tables and paths.

- :func:`policy_rollouts`: N-Sampling's rollouts (:func:`mialab.n_sampling.stages.generate`) from a
  trained policy (a LoRA snapshot merged into its model);
- :func:`train`: ADRA / ADRA+ / SFT-ablation training on the unlabelled candidates of a split.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from mialab.adra.rewards import adra_reward, membership_weights
from mialab.lm.engine import model_identity
from mialab.n_sampling.stages import generate, unlabelled
from mialab.n_sampling.tasks import Task
from mialab.training.grpo import GRPOSettings, export_checkpoint


def policy_rollouts(model_path: str, snapshot: str | os.PathLike | None, splits: list[pd.DataFrame], task: Task,
                    *, trust_remote_code: bool = False, **generation) -> list[pd.DataFrame]:
    """:func:`generate` from a policy snapshot (its LoRA adapter merged into ``model_path`` in a temporary
    folder), or from ``model_path`` itself when ``snapshot`` is None (the untrained policy). Resumable
    parts (``generation["parts"]``) are keyed on the snapshot and the model, not on the temporary folder."""
    if snapshot is None:
        return generate(model_path, splits, task, trust_remote_code=trust_remote_code, **generation)
    model_key = [model_identity(model_path), model_identity(snapshot)]
    with tempfile.TemporaryDirectory(prefix="adra-policy-") as tmp:
        export_checkpoint(snapshot, tmp, init=model_path, trust_remote_code=trust_remote_code)
        return generate(tmp, splits, task, trust_remote_code=trust_remote_code, model_key=model_key, **generation)


def train(model_path: str, split: pd.DataFrame, config: dict, work_dir: str | os.PathLike,
          snapshot_dir: str | os.PathLike, *, baseline_scores: pd.DataFrame | None = None,
          device: str = "auto", trust_remote_code: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train one variant (``config`` = the train stage's config) on the split's unlabelled candidates.

    Returns (training set, trainer log). ``baseline_scores`` (ADRA+ only) is a passive baseline's
    score table of the same candidates; only its ``id`` and weight column are read.
    """
    from mialab.adra.training import train_policy, training_set  # TRL/peft: only the training jobs pay for them
    from mialab.lm.loading import load_tokenizer

    variant = config["variant"]
    candidates = unlabelled(split)
    task = Task.from_config(config["task"])
    settings = GRPOSettings.from_config({**config["settings"],  # verl tokenizes its prompts without special tokens
                                         "prompt_special_tokens": config["prompt_format"] != "verl"})
    weights, reward = None, None
    if variant == "adra_plus":
        if baseline_scores is None:
            raise ValueError("adra_plus needs the passive baseline's scores of the candidates")
        weights = membership_weights(baseline_scores, config["contrastive"]["baseline"], list(candidates["id"]))
    if variant != "adra_sft":
        reward = adra_reward(**config["reward"])
    data = training_set(candidates, load_tokenizer(model_path, trust_remote_code=trust_remote_code), task, variant,
                        prompt_format=config["prompt_format"],
                        seed=settings.seed, distractors=config.get("contrastive", {}).get("distractors", 0),
                        random_suffixes=config.get("random_suffixes", 0), weights=weights,
                        replace=config.get("distractor_sampling") == "with_replacement",
                        reference=config.get("reward_reference"))
    Path(snapshot_dir).mkdir(parents=True, exist_ok=True)
    log = train_policy(model_path, data.drop(columns=["id"]), variant, settings, work_dir, reward,
                       snapshot_steps=config["snapshots"], snapshot_dir=snapshot_dir, device=device,
                       trust_remote_code=trust_remote_code)
    return data, log
