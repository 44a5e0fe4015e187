"""ADRA's attack training (Section 3, Appendix C): the policy learns to reconstruct the candidates.

The training set is the evaluation candidates themselves, members and non-members together and
*unlabelled*: :func:`training_set` refuses a table with a ``label`` column. Variants:

- ``adra``: GRPO with LoRA, reward against the candidate's own suffix (optionally the max over it
  and ``random_suffixes`` other candidates' suffixes); shared-prefix pairs (distillation) are one
  example each, rewarded for the better of their two suffixes;
- ``adra_plus``: GRPO with LoRA and the contrastive reward against the own suffix and K distractor
  suffixes (a pair's partner is one of them), weighted by a passive baseline's membership score;
- ``adra_sft``: the paper's ablation, supervised LoRA fine-tuning on the candidates' own suffixes
  with the same budget (optimizer steps, prompts per step, learning rate, LoRA) instead of RL.

Prompts are the task's (:mod:`mialab.n_sampling.tasks`), so training and evaluation see the same text.
The reward compares a rollout with each reference candidate's whole suffix, the words the prompt gives
as the answer's start included (``adra.reward_reference: suffix``, the released code: its data scripts'
``target_gt``), or with the suffix without them (``target``); the SFT ablation's target is the latter.

Checkpoints: the trainer writes one every ``save_steps`` optimizer steps into a work folder and a
rerun resumes from the last one (:func:`mialab.training.grpo.run_grpo`; the SFT ablation likewise). The
policies of the requested intermediate steps are copied out as they are saved (adapter and
tokenizer, no optimizer state), since the trainer keeps only the last few checkpoints.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from transformers import TrainerCallback

from mialab.adra import FINAL, VARIANTS
from mialab.adra.rewards import distractor_references, pair_partners, shares_prefix_pairs
from mialab.core.io import atomic_directory
from mialab.n_sampling.tasks import Task, fitted_split, prompts, target, trainer_prompt
from mialab.training.grpo import GRPOSettings, checkpoint_state, last_checkpoint, lora_config, run_grpo

TRAINER_STATE_FILES = ("optimizer.pt", "scheduler.pt", "training_args.bin")
#: what the RL variants' reward compares a rollout with (``adra.reward_reference``; :func:`training_set`)
REFERENCES = ("suffix", "target")


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown ADRA variant {variant!r}; known: {', '.join(VARIANTS)}")
    return variant


def training_set(candidates: pd.DataFrame, tokenizer, task: Task, variant: str, *, prompt_format: str, seed: int,
                 distractors: int = 7, random_suffixes: int = 0, weights: np.ndarray | None = None,
                 replace: bool = False, reference: str | None = None) -> pd.DataFrame:
    """The training rows of ``variant`` (module doc) for unlabelled ``candidates``.

    ``replace``: draw distractors / random suffixes i.i.d. (default: distinct, as the released code).
    ``reference`` (``adra.reward_reference``, the RL variants): what the reward compares a rollout with,
    each candidate's whole ``suffix`` (the released code's ``target_gt``, the given words included) or its
    ``target`` (the suffix without the words the prompt gives).

    RL rows: ``id``, ``prompt``, ``references`` (own first, then the others'), ``rule``, ``weight``
    (ADRA+'s w; NaN where unused). SFT rows: ``id``, ``prompt``, ``completion`` (the target).
    """
    check_variant(variant)
    if "label" in candidates.columns:
        raise ValueError("ADRA trains on unlabelled candidates: drop the label column first")
    fitted = fitted_split(candidates, tokenizer, task, prompt_format=prompt_format).reset_index(drop=True)
    ratio = task.assistant_prefix_ratio
    rows = pd.DataFrame({"id": fitted["id"], "prompt": [trainer_prompt(tokenizer, p, prompt_format) for p in
                                                        prompts(fitted, tokenizer, task, prompt_format=prompt_format)]})
    targets = [target(s, ratio, task.assistant_prefix_min_words) for s in fitted["suffix"]]
    if variant == "adra_sft":
        rows["completion"] = [t if p[-1:].isspace() else f" {t}" for p, t in zip(rows["prompt"], targets)]
        return rows
    if reference not in REFERENCES:
        raise ValueError(f"unknown reward reference {reference!r}; known: {', '.join(REFERENCES)}")
    if reference == "suffix":
        targets = list(fitted["suffix"])
    paired = shares_prefix_pairs(fitted)
    ids = list(fitted["id"])
    if variant == "adra_plus":
        if paired:
            raise ValueError("ADRA+ does not apply to candidates that share their prefix in pairs (distillation, "
                             "Appendix C.3): use the adra variant")
        if weights is None or len(weights) != len(ids):
            raise ValueError("adra_plus needs one membership weight per candidate")
        rows["references"] = distractor_references(ids, targets, distractors, seed=seed, forced=pair_partners(fitted),
                                                   replace=replace)
        rows["rule"] = "contrastive"
        rows["weight"] = np.asarray(weights, dtype=np.float64)
        return rows
    rows["weight"] = np.nan
    if paired:
        return pair_rows(rows, fitted, targets, ratio)
    if random_suffixes:
        rows["references"] = distractor_references(ids, targets, random_suffixes, seed=seed,   # a paired article first,
                                                   forced=pair_partners(fitted), replace=replace)   # as ADRA+'s
        rows["rule"] = "max"
    else:
        rows["references"] = [[t] for t in targets]
        rows["rule"] = "own"
    return rows


def pair_rows(rows: pd.DataFrame, candidates: pd.DataFrame, targets: Sequence[str], ratio: float) -> pd.DataFrame:
    """The distillation pair rule: one row per shared-prefix pair, rewarded for the better of its two suffixes."""
    if ratio > 0:
        raise ValueError("candidates sharing a prefix in pairs differ only in their suffix: an assistant prefix "
                         "taken from one suffix would favour it; set the task's assistant_prefix_ratio to 0")
    by_id = dict(zip(candidates["id"], targets, strict=True))
    partner = pair_partners(candidates)
    keep = [i for i in rows["id"] if str(i) < str(partner[i])]
    out = rows.set_index("id").loc[keep].reset_index()
    out["references"] = [[by_id[i], by_id[partner[i]]] for i in keep]
    out["rule"] = "max"
    return out


def copy_policy(checkpoint: str | os.PathLike, dest: str | os.PathLike) -> None:
    """Copy a trainer checkpoint's policy (weights or adapter, tokenizer, trainer state) without optimizer state."""
    with atomic_directory(dest) as tmp:
        for item in Path(checkpoint).iterdir():
            if item.is_file() and item.name not in TRAINER_STATE_FILES and not item.name.startswith("rng_state"):
                shutil.copy2(item, tmp / item.name)


class SaveLastStep(TrainerCallback):
    """Save a checkpoint at the last optimizer step, so that the last checkpoint is the trained policy."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_save = True
        return control


class SnapshotPolicies(TrainerCallback):
    """Copy the policy of every checkpoint whose step is in ``steps`` to ``directory/step-<step>``."""

    def __init__(self, steps: Sequence[int], directory: str | os.PathLike):
        self.steps = {int(s) for s in steps}
        self.directory = Path(directory)

    def on_save(self, args, state, control, **kwargs):
        if state.global_step in self.steps and state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            copy_policy(checkpoint, self.directory / f"step-{state.global_step}")
        return control


def run_record(log: pd.DataFrame, data: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The trainer log with float64 metrics (``step`` stays an integer) and the manifest's record of the
    run: its last step, the training rows and the first and last logged reward (None if none was logged)."""
    log = log.astype({c: "float64" for c in log.columns if c != "step"})
    rewards = log["reward"].dropna() if "reward" in log.columns else pd.Series(dtype=float)
    return log, {"global_step": int(log["step"].max()), "rows": len(data),
                 "reward_first": float(rewards.iloc[0]) if len(rewards) else None,
                 "reward_last": float(rewards.iloc[-1]) if len(rewards) else None}


def run_sft_ablation(model_path: str, data: pd.DataFrame, settings: GRPOSettings, work_dir: str | os.PathLike, *,
                     device: str = "auto", callbacks: list | None = None, trust_remote_code: bool = False) -> str:
    """The RL-vs-SFT ablation: LoRA SFT on ``prompt`` -> ``completion`` with GRPO's budget; the last checkpoint.

    Same optimizer steps and prompts per step as the GRPO run (``batch_size / num_generations`` per
    device and micro-step, ``grad_accum`` micro-steps), learning rate, schedule, LoRA and seed; the
    loss covers the completion only. Resumes from the last checkpoint in ``work_dir``.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from mialab.lm.loading import load_causal_lm, load_tokenizer, resolve_device, resolve_precision

    s = settings
    cpu = resolve_device(device) == "cpu"
    precision = resolve_precision(s.precision, resolve_device(device))
    args = SFTConfig(
        output_dir=str(work_dir), learning_rate=s.lr, num_train_epochs=s.epochs, max_steps=s.max_steps,
        per_device_train_batch_size=s.batch_size // s.num_generations, gradient_accumulation_steps=s.grad_accum,
        lr_scheduler_type=s.lr_scheduler, warmup_steps=s.warmup_steps, weight_decay=s.weight_decay,
        max_grad_norm=s.grad_clip, save_strategy="steps", save_steps=s.save_steps,
        save_total_limit=s.save_total_limit, bf16=precision == "bf16", use_cpu=cpu, seed=s.seed, data_seed=s.seed,
        full_determinism=cpu, logging_steps=s.logging_steps, report_to="none", dataloader_num_workers=0,
        completion_only_loss=True, max_length=None, shuffle_dataset=True,
        gradient_checkpointing=s.activation_checkpointing,
    )
    trainer = SFTTrainer(model=load_causal_lm(model_path, device="cpu", trust_remote_code=trust_remote_code), args=args,
                         train_dataset=Dataset.from_pandas(data[["prompt", "completion"]].reset_index(drop=True),
                                                           preserve_index=False),
                         processing_class=load_tokenizer(model_path, trust_remote_code=trust_remote_code),
                         peft_config=lora_config(s.lora or {}),
                         callbacks=callbacks or [])
    trainer.train(resume_from_checkpoint=last_checkpoint(work_dir))
    final = last_checkpoint(work_dir)
    if final is None:
        raise RuntimeError(f"SFT wrote no checkpoint to {work_dir}")
    return final


def train_policy(model_path: str, data: pd.DataFrame, variant: str, settings: GRPOSettings,
                 work_dir: str | os.PathLike, reward: Callable | None, *, snapshot_steps: Sequence[int] = (),
                 snapshot_dir: str | os.PathLike, device: str = "auto", trust_remote_code: bool = False) -> pd.DataFrame:
    """Train ``variant`` on ``data`` (resuming from ``work_dir``); copy the policies of ``snapshot_steps`` and
    the final one (``snapshot_dir/final``) out of the work folder. Returns the trainer's log history.
    ``trust_remote_code``: the model's ``models.<name>.trust_remote_code``."""
    callbacks = [SaveLastStep(), SnapshotPolicies(snapshot_steps, snapshot_dir)]
    if check_variant(variant) == "adra_sft":
        final = run_sft_ablation(model_path, data, settings, work_dir, device=device, callbacks=callbacks,
                                 trust_remote_code=trust_remote_code)
    else:
        if reward is None:
            raise ValueError(f"{variant} needs a reward")
        final = run_grpo(model_path, data, reward, settings, work_dir, device=device, callbacks=callbacks,
                         trust_remote_code=trust_remote_code).checkpoint
    state = checkpoint_state(final)
    if state.global_step != state.max_steps:
        raise RuntimeError(f"the last checkpoint {final} is at step {state.global_step} of {state.max_steps}")
    missing = [s for s in snapshot_steps if not (Path(snapshot_dir) / f"step-{int(s)}").is_dir()]
    if missing:
        raise ValueError(f"no checkpoint was saved at step(s) {missing}; the run saved every {settings.save_steps} "
                         f"steps and ended at step {state.global_step}")
    copy_policy(final, Path(snapshot_dir) / FINAL)
    return pd.DataFrame(state.log_history)
