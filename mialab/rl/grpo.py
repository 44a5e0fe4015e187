"""GRPO runner: TRL's ``GRPOTrainer`` with config-driven hyperparameters, optional LoRA, exact resume.

GRPO (Shao et al. 2024) samples ``num_generations`` completions per prompt, scores them with a
reward, standardises the rewards within each prompt's group into advantages and maximises the
clipped policy-gradient objective, minus ``beta`` x KL to the initial policy (``beta = 0``: no
reference model is loaded). The reward is any callable ``(completions, **columns) ->
list[float]`` (:mod:`mialab.rl.rewards`); the training set is a table with a ``prompt`` column
and the columns the reward reads. Prompts are plain text (no chat template is applied).

Batching (TRL's semantics): ``batch_size`` completions per device and micro-step, i.e.
``batch_size / num_generations`` prompts; ``grad_accum`` micro-steps per optimizer step. An epoch
is one pass over the prompts in a seeded random order; a remainder smaller than one generation
batch is left out of that epoch (TRL's ``RepeatSampler``).

Checkpoints and resume. A trainer checkpoint (weights or LoRA adapter, optimizer, scheduler, RNG
states, trainer state) is written to ``work_dir`` every ``save_steps`` optimizer steps and at the
end of every epoch. :func:`run_grpo` resumes from the last checkpoint in ``work_dir`` (an
interrupted job) or from a given checkpoint of the same run (the previous epoch's), and
``until_epoch`` stops after an epoch while keeping the schedule of the full run, so training a
run epoch by epoch gives the same weights as training it at once. Two changes to TRL make that
hold: the prompt order of epoch ``e`` depends only on ``(seed, e)`` (stock TRL draws every
epoch's order from one generator, which a resumed run restarts, repeating epoch 0's order), and
the checkpoint lands on a generation boundary (``num_iterations = 1`` or ``save_steps`` and the
steps per epoch multiples of it; otherwise a resumed run regenerates a reused batch). On CPU the
run is deterministic under ``seed`` (``full_determinism``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class GRPOSettings:
    """GRPO hyperparameters; the keys of a config's ``train`` block.

    ``lora`` holds peft ``LoraConfig`` options (``r``, ``lora_alpha``, ``lora_dropout``,
    ``target_modules``, ...); None trains every weight. ``max_prompt_length`` keeps the last
    that many prompt tokens (a leading BOS is kept), as TRL did before it dropped the option;
    None keeps every token. ``max_steps > 0`` overrides ``epochs``.
    """

    lr: float = 1.0e-6
    beta: float = 0.0
    epochs: int = 1
    max_steps: int = -1
    num_generations: int = 8
    batch_size: int = 8
    grad_accum: int = 1
    num_iterations: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_prompt_length: int | None = None
    max_completion_length: int = 256
    epsilon: float = 0.2
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    lr_scheduler: str = "constant"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    save_steps: int = 50
    save_total_limit: int | None = 2
    precision: str = "fp32"
    activation_checkpointing: bool = False
    lora: dict | None = None
    logging_steps: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; known: {', '.join(PRECISIONS)}")
        if self.batch_size % self.num_generations:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of num_generations "
                             f"{self.num_generations} (whole prompt groups per micro-step)")

    @classmethod
    def from_config(cls, spec: dict) -> GRPOSettings:
        """Settings from a config block; an unknown key is an error naming it and the known ones."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise KeyError(f"unknown GRPO setting(s) {unknown}; known: {', '.join(sorted(known))}")
        return cls(**spec)


def grpo_config(settings: GRPOSettings, output_dir: str | os.PathLike, *, device: str = "cpu"):
    """The TRL ``GRPOConfig`` of ``settings``; trainer checkpoints go to ``output_dir``."""
    from trl import GRPOConfig

    s = settings
    cpu = device == "cpu"
    return GRPOConfig(
        output_dir=str(output_dir), learning_rate=s.lr, beta=s.beta, num_train_epochs=s.epochs,
        max_steps=s.max_steps, num_generations=s.num_generations, per_device_train_batch_size=s.batch_size,
        gradient_accumulation_steps=s.grad_accum, num_iterations=s.num_iterations, temperature=s.temperature,
        top_p=s.top_p, top_k=s.top_k, max_completion_length=s.max_completion_length, epsilon=s.epsilon,
        loss_type=s.loss_type, scale_rewards=s.scale_rewards, lr_scheduler_type=s.lr_scheduler,
        warmup_steps=s.warmup_steps, weight_decay=s.weight_decay, max_grad_norm=s.grad_clip,
        save_strategy="steps", save_steps=s.save_steps, save_total_limit=s.save_total_limit, save_only_model=False,
        bf16=s.precision == "bf16", use_cpu=cpu, activation_checkpointing=s.activation_checkpointing,
        seed=s.seed, data_seed=s.seed, full_determinism=cpu, disable_dropout=True, logging_steps=s.logging_steps,
        ddp_find_unused_parameters=False,
        report_to="none", dataloader_num_workers=0, shuffle_dataset=True,
    )


def lora_config(options: dict):
    """A peft ``LoraConfig`` for causal-LM fine-tuning from config options."""
    from peft import LoraConfig

    return LoraConfig(task_type="CAUSAL_LM", **options)


def epoch_seed(seed: int, epoch: int) -> int:
    """Seed of epoch ``epoch``'s prompt order: independent of the epochs before it."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def truncate_prompt(ids: Sequence[int], max_length: int | None, bos_token_id: int | None) -> list[int]:
    """The last ``max_length`` tokens of a prompt, keeping a leading BOS token."""
    ids = list(ids)
    if max_length is None or len(ids) <= max_length:
        return ids
    head = ids[:1] if bos_token_id is not None and ids[0] == bos_token_id else []
    return head + ids[len(ids) - (max_length - len(head)):]


def _trainer_class():
    """``ResumableGRPOTrainer``, built on first use so importing this module does not import TRL."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    class EpochSeededRepeatSampler(RepeatSampler):
        """TRL's sampler with the prompt order of each epoch seeded by ``(seed, epoch)``."""

        def set_epoch(self, epoch: int) -> None:
            if self.shuffle:
                self.generator.manual_seed(epoch_seed(self.seed, epoch))

    class ResumableGRPOTrainer(GRPOTrainer):
        """``GRPOTrainer`` with epoch-seeded prompt order and prompt truncation (module doc)."""

        def __init__(self, *args, max_prompt_length: int | None = None, **kwargs):
            self.max_prompt_length = max_prompt_length
            super().__init__(*args, **kwargs)

        def _get_train_sampler(self, dataset=None):
            return EpochSeededRepeatSampler(
                data_source=self.train_dataset if dataset is None else dataset,
                mini_repeat_count=self.num_generations,
                batch_size=self.args.generation_batch_size // self.num_generations,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
                shuffle=self.shuffle_dataset, seed=self.args.seed)

        def _tokenize_prompts(self, prompts: list):
            ids, images, fields = super()._tokenize_prompts(prompts)
            bos = self.processing_class.bos_token_id
            return [truncate_prompt(p, self.max_prompt_length, bos) for p in ids], images, fields

    class EpochCheckpoints(TrainerCallback):
        """Save a trainer checkpoint at every epoch end; stop after epoch ``until_epoch``."""

        def __init__(self, until_epoch: int | None):
            self.until_epoch = until_epoch

        def on_epoch_end(self, args, state, control, **kwargs):
            control.should_save = True
            if self.until_epoch is not None and round(state.epoch) >= self.until_epoch:
                control.should_training_stop = True
            return control

    return ResumableGRPOTrainer, EpochCheckpoints


def last_checkpoint(work_dir: str | os.PathLike) -> str | None:
    """The trainer checkpoint with the highest step in ``work_dir`` (None when there is none)."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(work_dir)) if Path(work_dir).is_dir() else None


def checkpoint_state(checkpoint: str | os.PathLike):
    """The ``TrainerState`` saved in a trainer checkpoint (epoch, global step, log history)."""
    from transformers import TrainerState

    return TrainerState.load_from_json(os.path.join(checkpoint, "trainer_state.json"))


@dataclass
class GRPORun:
    """A finished :func:`run_grpo` call: the checkpoint written last (the trained policy, its
    optimizer and RNG states) and the metrics logged up to it (one row per logged step)."""

    checkpoint: str
    log: pd.DataFrame = field(repr=False)


def run_grpo(model_path: str, data: pd.DataFrame, reward: Callable | list[Callable], settings: GRPOSettings,
             work_dir: str | os.PathLike, *, resume_from: str | None = None, until_epoch: int | None = None,
             device: str = "auto", dtype: str = "float32", callbacks: list | None = None) -> GRPORun:
    """Train ``model_path`` with GRPO on ``data`` (``prompt`` plus the reward's columns).

    Resumes from the last checkpoint in ``work_dir`` when there is one, else from ``resume_from``
    (a checkpoint of this same run), else starts afresh. ``until_epoch`` stops after that epoch; a
    checkpoint that has already reached it is returned as is (a job killed after its last save).
    """
    from datasets import Dataset

    from mialab.models.loading import load_causal_lm, load_tokenizer, resolve_device

    if "prompt" not in data.columns:
        raise KeyError(f"the GRPO training set needs a 'prompt' column; it has {list(data.columns)}")
    start = last_checkpoint(work_dir) or resume_from
    if start is not None and until_epoch is not None and round(checkpoint_state(start).epoch) >= until_epoch:
        return GRPORun(checkpoint=str(start), log=pd.DataFrame(checkpoint_state(start).log_history))
    device = resolve_device(device)
    trainer_cls, epoch_checkpoints = _trainer_class()
    args = grpo_config(settings, work_dir, device=device)
    trainer = trainer_cls(
        model=load_causal_lm(model_path, dtype=dtype, device="cpu"),
        reward_funcs=list(reward) if isinstance(reward, (list, tuple)) else [reward],
        args=args, train_dataset=Dataset.from_pandas(data.reset_index(drop=True), preserve_index=False),
        processing_class=load_tokenizer(model_path, padding_side="left"),
        peft_config=lora_config(settings.lora) if settings.lora else None,
        callbacks=[epoch_checkpoints(until_epoch), *(callbacks or [])],
        max_prompt_length=settings.max_prompt_length,
    )
    trainer.train(resume_from_checkpoint=start)
    final = last_checkpoint(work_dir)
    if final is None:
        raise RuntimeError(f"GRPO wrote no checkpoint to {work_dir}")
    return GRPORun(checkpoint=final, log=pd.DataFrame(checkpoint_state(final).log_history))


def export_checkpoint(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *, init: str | None = None) -> None:
    """Save a trainer checkpoint's policy as a standalone model folder with its tokenizer; a LoRA
    checkpoint's adapter is merged into the run's ``init`` model."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    from mialab.models.loading import load_causal_lm

    if (Path(checkpoint) / "adapter_config.json").exists():
        if init is None:
            raise ValueError(f"{checkpoint} holds a LoRA adapter: exporting it needs the run's init model")
        model = PeftModel.from_pretrained(load_causal_lm(init, device="cpu"), str(checkpoint)).merge_and_unload()
    else:
        model = load_causal_lm(str(checkpoint), device="cpu")
    model.config.use_cache = True
    model.save_pretrained(str(out_dir), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(checkpoint)).save_pretrained(str(out_dir))
