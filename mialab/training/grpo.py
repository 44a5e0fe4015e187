"""GRPO runner: TRL's ``GRPOTrainer`` with config-driven hyperparameters, optional LoRA, exact resume.

GRPO (Shao et al. 2024) samples ``num_generations`` completions per prompt, scores them with a
reward, centres the rewards within each prompt's group into advantages (``scale_rewards: group`` divides
by the group's standard deviation too; ``none``: verl's ``grpo_use_std: False``) and maximises the
clipped policy-gradient objective, minus ``beta`` x KL to the initial policy (``beta = 0``: no
reference model is loaded). The reward is any callable ``(completions, **columns) ->
list[float]`` (:mod:`mialab.training.rewards`); the training set is a table with a ``prompt`` column
and the columns the reward reads. A prompt is plain text (sent as it is) or a conversation (a list of
``{role, content}`` turns) that TRL renders with the tokenizer's chat template and its generation prompt.

Entropy bonus (verl's ``entropy_coeff``): ``entropy_coeff > 0`` subtracts that times the policy's
entropy from the loss, the entropy of each completion token's full next-token distribution (at the
sampling temperature) aggregated over the tokens as the loss type aggregates the policy loss
(verl's ``loss_agg_mode``; :func:`aggregate_like_loss`), so the bonus acts as ``-entropy_coeff x
entropy`` added to every token's loss. TRL's own ``entropy_coef`` is not used: it takes a token
mean whatever the loss type.

Batching (TRL's semantics): ``batch_size`` completions per device and micro-step, i.e.
``batch_size / num_generations`` prompts; ``grad_accum`` micro-steps per optimizer step. A rollout
batch (TRL's generation batch) is ``steps_per_generation`` micro-steps per device (absent: ``grad_accum``,
one optimizer step per rollout batch); with more, the batch's completions, shuffled, feed
``steps_per_generation / grad_accum`` optimizer steps (x ``num_iterations``), each on the log-probability
ratio to the policy that sampled them, clipped at ``epsilon``: verl's PPO mini-batches
(``ppo_mini_batch_size``; the LaRA code's eurus_grpo.sh: 16 updates per 128-prompt batch, 8 prompts each).
:func:`update_arithmetic` gives the prompts per rollout batch and per update of a world size. An epoch
is one pass over the prompts in a seeded random order; a remainder smaller than one rollout
batch is left out of that epoch (TRL's ``RepeatSampler``; verl's ``drop_last``).

Loss scale (``policy_loss_scale``): TRL's loss times a constant. The LaRA code's verl fork
(``loss_remove_token_mean``) sums each completion's token losses over the response width and adds the
completions of a rank's mini-batch: TRL's ``dr_grpo`` (the mean of those sums) times the completions a rank
takes per update (``ppo_mini_batch_size x n / n_gpus``: 8), which only gradient clipping and Adam's epsilon
see. ``entropy_aggregation``: ``like_loss`` (default) or ``token_mean`` (the fork's ``masked_mean`` of each
micro-batch, TRL's own bonus).

Checkpoints and resume. A trainer checkpoint (weights or LoRA adapter, optimizer, scheduler, RNG
states, trainer state) is written to ``work_dir`` every ``save_steps`` optimizer steps and at the
end of every epoch. :func:`run_grpo` resumes from the last checkpoint in ``work_dir`` (an
interrupted job) or from a given checkpoint of the same run (the previous epoch's), and
``until_epoch`` stops after an epoch while keeping the schedule of the full run, so training a
run epoch by epoch gives the same weights as training it at once. Two changes to TRL make that
hold: the prompt order of epoch ``e`` depends only on ``(seed, e)`` (stock TRL draws every
epoch's order from one generator, which a resumed run restarts, repeating epoch 0's order), and
the checkpoint lands on a rollout-batch boundary (one update per rollout batch, or ``save_steps`` and the
steps per epoch multiples of ``updates_per_rollout``; otherwise a resumed run regenerates a reused batch). On CPU the
run is deterministic under ``seed`` (``full_determinism``). An epoch ends at a global step counted
in whole optimizer steps (:func:`steps_per_epoch`), so a checkpoint part-way through an epoch is
resumed, never taken for the epoch's end.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from mialab.core.settings import settings_from
from mialab.training.checkpoints import refusing_pickled_code

PRECISIONS = ("fp32", "bf16", "auto")
#: how the entropy bonus aggregates a micro-batch's token entropies (module doc)
ENTROPY_AGGREGATIONS = ("like_loss", "token_mean")


@dataclass(frozen=True, kw_only=True)
class GRPOSettings:
    """GRPO hyperparameters; the keys of a config's ``train`` block.

    ``lora`` holds peft ``LoraConfig`` options (``r``, ``lora_alpha``, ``lora_dropout``,
    ``target_modules``, ...); None trains every weight. ``vllm`` holds TRL's vLLM generation options
    without their ``vllm_`` prefix (``mode``, ``tensor_parallel_size``, ``gpu_memory_utilization``,
    ...; :func:`vllm_generation`); None generates with transformers. ``max_prompt_length`` keeps the last
    that many prompt tokens (a leading BOS is kept), as TRL did before it dropped the option;
    None keeps every token. ``prompt_special_tokens``: a plain-text prompt is tokenized with the tokenizer's
    special tokens (a BOS; TRL's), or without (False: verl's, the text's tokens alone). ``max_steps > 0`` overrides
    ``epochs``. ``entropy_coeff``: the entropy
    bonus's coefficient (module doc; 0: none, TRL's loss unchanged). ``steps_per_generation``,
    ``policy_loss_scale`` and ``entropy_aggregation``: the module doc's batching and loss scale.

    Defaults come from the schema alone (``models.<name>.train`` of an ``rl`` model, ``adra.train``; its
    validation fills them in): a field the schema gives a default to has none here. The defaults below are
    what a key means where a section leaves it out (``tests/test_schema_defaults.py`` holds them to the
    schema's).
    """

    lr: float
    beta: float
    epochs: int
    max_steps: int = -1
    num_generations: int
    batch_size: int
    grad_accum: int
    num_iterations: int
    steps_per_generation: int | None = None
    temperature: float
    top_p: float
    top_k: int
    max_prompt_length: int | None = None
    prompt_special_tokens: bool = True
    max_completion_length: int
    epsilon: float
    loss_type: str
    entropy_coeff: float = 0.0
    entropy_aggregation: str = "like_loss"
    policy_loss_scale: float = 1.0
    scale_rewards: str
    lr_scheduler: str
    warmup_steps: int
    weight_decay: float
    grad_clip: float
    save_steps: int
    save_total_limit: int | None
    precision: str
    activation_checkpointing: bool
    lora: dict | None = None
    vllm: dict | None = None
    logging_steps: int = 1
    seed: int

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; known: {', '.join(PRECISIONS)}")
        if self.batch_size % self.num_generations:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of num_generations "
                             f"{self.num_generations} (whole prompt groups per micro-step)")
        if self.micro_steps_per_generation % self.grad_accum:
            raise ValueError(f"steps_per_generation {self.steps_per_generation} must be a multiple of grad_accum "
                             f"{self.grad_accum} (whole optimizer steps per rollout batch)")
        if self.entropy_aggregation not in ENTROPY_AGGREGATIONS:
            raise ValueError(f"unknown entropy_aggregation {self.entropy_aggregation!r}; known: "
                             f"{', '.join(ENTROPY_AGGREGATIONS)}")

    @property
    def micro_steps_per_generation(self) -> int:
        """Micro-steps per device of one rollout batch (TRL's ``steps_per_generation``; absent: ``grad_accum``)."""
        return self.grad_accum if self.steps_per_generation is None else self.steps_per_generation

    @classmethod
    def from_config(cls, spec: dict) -> GRPOSettings:
        """Settings from a config block; an unknown key is an error naming it and the known ones."""
        return settings_from(cls, spec, "GRPO")


def vllm_generation(options: dict | None, device: str) -> dict:
    """TRL ``GRPOConfig`` arguments for rollouts generated by vLLM (``use_vllm`` and the ``vllm_*``
    options), or none (transformers' ``generate``) when ``options`` is None, on CPU, or where vLLM is
    not installed beside TRL (TRL warns when its version is not one it was tested with).

    An unknown option is an error naming the known ones, checked before any fallback.
    """
    if not options:
        return {}
    from trl import GRPOConfig
    from trl.import_utils import is_vllm_available

    known = sorted(f[len("vllm_"):] for f in GRPOConfig.__dataclass_fields__ if f.startswith("vllm_"))
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise KeyError(f"unknown vLLM generation option(s) {unknown}; known: {', '.join(known)}")
    if device == "cpu":
        return {}
    if not is_vllm_available():
        from mialab.core.progress import console

        console.log("vllm is not installed where TRL can use it: GRPO rollouts use transformers' generate")
        return {}
    return {"use_vllm": True, **{f"vllm_{k}": v for k, v in options.items()}}


def grpo_config(settings: GRPOSettings, output_dir: str | os.PathLike, *, device: str = "cpu"):
    """The TRL ``GRPOConfig`` of ``settings``; trainer checkpoints go to ``output_dir``."""
    from trl import GRPOConfig

    from mialab.lm.loading import check_bf16_speed, resolve_precision

    s = settings
    cpu = device == "cpu"
    precision = resolve_precision(s.precision, device)
    check_bf16_speed(precision, device)
    return GRPOConfig(
        output_dir=str(output_dir), learning_rate=s.lr, beta=s.beta, num_train_epochs=s.epochs,
        max_steps=s.max_steps, num_generations=s.num_generations, per_device_train_batch_size=s.batch_size,
        gradient_accumulation_steps=s.grad_accum, steps_per_generation=s.micro_steps_per_generation,
        num_iterations=s.num_iterations, temperature=s.temperature,
        top_p=s.top_p, top_k=s.top_k, max_completion_length=s.max_completion_length, epsilon=s.epsilon,
        loss_type=s.loss_type, scale_rewards=s.scale_rewards, lr_scheduler_type=s.lr_scheduler,
        warmup_steps=s.warmup_steps, weight_decay=s.weight_decay, max_grad_norm=s.grad_clip,
        save_strategy="steps", save_steps=s.save_steps, save_total_limit=s.save_total_limit, save_only_model=False,
        bf16=precision == "bf16", use_cpu=cpu, activation_checkpointing=s.activation_checkpointing,
        seed=s.seed, data_seed=s.seed, full_determinism=cpu, disable_dropout=True, logging_steps=s.logging_steps,
        ddp_find_unused_parameters=False,
        report_to="none", dataloader_num_workers=0, shuffle_dataset=True, **vllm_generation(s.vllm, device),
    )


def lora_config(options: dict):
    """A peft ``LoraConfig`` for causal-LM fine-tuning from config options."""
    from peft import LoraConfig

    return LoraConfig(task_type="CAUSAL_LM", **options)


def epoch_seed(seed: int, epoch: int) -> int:
    """Seed of epoch ``epoch``'s prompt order: independent of the epochs before it."""
    from mialab.lm.engine import derived_seed

    return derived_seed(seed, epoch)


def update_arithmetic(settings: GRPOSettings, world_size: int) -> dict[str, int]:
    """A run's batches on ``world_size`` processes: ``rollout_prompts`` (prompts of one rollout batch, verl's
    ``train_batch_size``), ``update_prompts`` (prompts per optimizer step, verl's ``ppo_mini_batch_size``) and
    ``updates_per_rollout`` (optimizer steps per rollout batch)."""
    s = settings
    completions = s.batch_size * world_size
    return {"rollout_prompts": completions * s.micro_steps_per_generation // s.num_generations,
            "update_prompts": completions * s.grad_accum // s.num_generations,
            "updates_per_rollout": s.micro_steps_per_generation // s.grad_accum * s.num_iterations}


def steps_per_epoch(n_prompts: int, settings: GRPOSettings, world_size: int = 1) -> int:
    """Optimizer steps in one epoch over ``n_prompts`` prompts (TRL's ``RepeatSampler`` arithmetic):
    the whole rollout batches of its prompts (:func:`update_arithmetic`), each used for
    ``updates_per_rollout`` optimizer steps."""
    s = settings
    batches = update_arithmetic(s, world_size)
    if n_prompts < batches["rollout_prompts"]:
        raise ValueError(f"{n_prompts} prompts are fewer than one rollout batch of {batches['rollout_prompts']} "
                         f"(batch_size {s.batch_size} x {world_size} processes x steps_per_generation "
                         f"{s.micro_steps_per_generation} / num_generations {s.num_generations})")
    return n_prompts // batches["rollout_prompts"] * batches["updates_per_rollout"]


def truncate_prompt(ids: Sequence[int], max_length: int | None, bos_token_id: int | None) -> list[int]:
    """The last ``max_length`` tokens of a prompt, keeping a leading BOS token."""
    ids = list(ids)
    if max_length is None or len(ids) <= max_length:
        return ids
    head = ids[:1] if bos_token_id is not None and ids[0] == bos_token_id else []
    return head + ids[len(ids) - (max_length - len(head)):]


def aggregate_like_loss(values, mask, loss_type: str, *, accumulation: float, max_completion_length: int,
                        window_tokens):
    """Per-token ``values`` of one micro-batch (completions x tokens, ``mask`` 1 on completion tokens)
    aggregated as TRL aggregates the policy loss of ``loss_type``, in verl's ``loss_agg_mode`` terms:
    grpo: mean over completions of their token means (seq-mean-token-mean); bnpo: the micro-batch's token
    mean; dr_grpo: token sum over completions x ``max_completion_length`` (seq-mean-token-sum-norm); each
    over ``accumulation`` micro-steps; dapo: token sum over ``window_tokens``, the tokens of one
    accumulation window per process (token-mean over the optimizer step)."""
    total = (values * mask).sum()
    if loss_type == "grpo":
        return ((values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
    if loss_type == "bnpo":
        return total / mask.sum().clamp(min=1.0) / accumulation
    if loss_type == "dr_grpo":
        return total / (values.size(0) * max_completion_length) / accumulation
    if loss_type == "dapo":
        return total / window_tokens
    raise ValueError(f"no entropy aggregation for loss_type {loss_type!r}; known: grpo, bnpo, dr_grpo, dapo")


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
        """``GRPOTrainer`` with epoch-seeded prompt order, prompt truncation, a loss scale and verl's entropy bonus
        (module doc)."""

        def __init__(self, *args, max_prompt_length: int | None = None, entropy_coeff: float = 0.0,
                     entropy_aggregation: str = "like_loss", policy_loss_scale: float = 1.0,
                     prompt_special_tokens: bool = True, **kwargs):
            self.max_prompt_length, self.entropy_coeff, self._entropies = max_prompt_length, entropy_coeff, None
            self.prompt_special_tokens = prompt_special_tokens
            self.entropy_aggregation, self.policy_loss_scale = entropy_aggregation, policy_loss_scale
            super().__init__(*args, **kwargs)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            """TRL's, keeping the entropies (with their gradient) of the loss's forward pass for the bonus."""
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            self._entropies = out[1]
            return out

        def _compute_loss(self, model, inputs):
            """TRL's loss times ``policy_loss_scale``, minus ``entropy_coeff`` x the entropy aggregated like the
            loss or as a token mean (:func:`aggregate_like_loss`; module doc)."""
            loss = super()._compute_loss(model, inputs) * self.policy_loss_scale
            entropies, self._entropies = self._entropies, None
            if not self.entropy_coeff:
                return loss
            training = self.model.training  # TRL's: no accumulation in evaluation
            accumulation = self.current_gradient_accumulation_steps if training else 1
            window = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if training:  # num_items_in_batch spans the generation batch: one accumulation window of it
                window = window * accumulation / self.args.steps_per_generation
            how = self.loss_type if self.entropy_aggregation == "like_loss" else "bnpo"   # bnpo: a token mean
            return loss - self.entropy_coeff * aggregate_like_loss(
                entropies, inputs["completion_mask"], how, accumulation=accumulation,
                max_completion_length=self.max_completion_length, window_tokens=window)

        def _get_train_sampler(self, dataset=None):
            return EpochSeededRepeatSampler(
                data_source=self.train_dataset if dataset is None else dataset,
                mini_repeat_count=self.num_generations,
                batch_size=self.args.generation_batch_size // self.num_generations,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
                shuffle=self.shuffle_dataset, seed=self.args.seed)

        def _tokenize_prompts(self, prompts: list):
            ids, images, fields = super()._tokenize_prompts(prompts)
            if not self.prompt_special_tokens and isinstance(prompts[0], str):   # verl's: the text's tokens alone
                ids = self.processing_class(text=prompts, add_special_tokens=False)["input_ids"]
            bos = self.processing_class.bos_token_id
            return [truncate_prompt(p, self.max_prompt_length, bos) for p in ids], images, fields

    class EpochCheckpoints(TrainerCallback):
        """Save a trainer checkpoint at every epoch end; stop at step ``until_step`` (integer steps:
        a float epoch such as 8/12 must never count as a finished epoch)."""

        def __init__(self, epoch_steps: int, total_steps: int, until_step: int):
            self.epoch_steps, self.total_steps, self.until_step = epoch_steps, total_steps, until_step

        def on_train_begin(self, args, state, control, **kwargs):
            if state.max_steps != self.total_steps:
                raise RuntimeError(f"TRL plans {state.max_steps} GRPO steps, mialab.training.grpo.steps_per_epoch "
                                   f"{self.total_steps}: the epoch arithmetic no longer matches TRL's")

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % self.epoch_steps == 0:
                control.should_save = True
            if state.global_step >= self.until_step:
                control.should_save = control.should_training_stop = True
            return control

    class FiniteGradients(TrainerCallback):
        """Stop at the first step whose gradient norm is not finite, naming it: the update has already
        spoilt the weights, and the next step would only fail later, in sampling, with a device-side assert."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            norm = (logs or {}).get("grad_norm")
            if norm is not None and not math.isfinite(float(norm)):
                raise FloatingPointError(f"GRPO step {state.global_step}: the gradient norm is {norm}; no checkpoint "
                                         "after it is written (mialab.lm.loading.no_cudnn_attention lists a known "
                                         "cause on CUDA)")

    return ResumableGRPOTrainer, EpochCheckpoints, FiniteGradients


def last_checkpoint(work_dir: str | os.PathLike) -> str | None:
    """The complete trainer checkpoint with the highest step in ``work_dir`` (None when there is none).

    The trainer writes ``trainer_state.json`` last (and deletes older checkpoints only after it):
    a checkpoint without it was cut short by a kill and is ignored.
    """
    if not Path(work_dir).is_dir():
        return None
    steps = [(int(p.name.split("-")[1]), p) for p in Path(work_dir).glob("checkpoint-*")
             if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").is_file()]
    return str(max(steps)[1]) if steps else None


def checkpoint_state(checkpoint: str | os.PathLike):
    """The ``TrainerState`` saved in a trainer checkpoint (epoch, global step, log history)."""
    from transformers import TrainerState

    return TrainerState.load_from_json(os.path.join(checkpoint, "trainer_state.json"))


@dataclass
class GRPORun:
    """A finished :func:`run_grpo` call: the checkpoint written last (the trained policy, its
    optimizer and RNG states), its global step, the step the call was to reach, and the metrics
    logged up to it (one row per logged step)."""

    checkpoint: str
    steps: int
    expected_steps: int
    log: pd.DataFrame = field(repr=False)

    @classmethod
    def of(cls, checkpoint: str, expected_steps: int) -> GRPORun:
        state = checkpoint_state(checkpoint)
        return cls(checkpoint=str(checkpoint), steps=int(state.global_step), expected_steps=int(expected_steps),
                   log=pd.DataFrame(state.log_history))


def epoch_record(run: GRPORun, corpus: pd.DataFrame, epoch: int, what: str) -> tuple[pd.DataFrame, dict]:
    """The trainer log with float64 metrics and the manifest's record of epoch ``epoch``: corpus size,
    global step, the checked step count (an error unless every step ran) and the epoch's mean reward."""
    from mialab.training.checkpoints import check_steps

    steps = check_steps(run.steps, run.expected_steps, what)
    log = run.log.astype({c: "float64" for c in run.log.columns})
    logged = log.dropna(subset=["reward"]) if "reward" in log.columns else log.iloc[:0]
    this_epoch = logged[logged["epoch"] > epoch - 1]
    return log, {"corpus": {"prompts": len(corpus), "members": int(corpus["target"].sum())},
                 "global_step": run.steps, "steps": steps,
                 "epoch_reward_mean": float(this_epoch["reward"].mean()) if len(this_epoch) else None}


def run_grpo(model_path: str, data: pd.DataFrame, reward: Callable | list[Callable], settings: GRPOSettings,
             work_dir: str | os.PathLike, *, resume_from: str | None = None, until_epoch: int | None = None,
             device: str = "auto", dtype: str = "float32", callbacks: list | None = None,
             trust_remote_code: bool = False) -> GRPORun:
    """Train ``model_path`` with GRPO on ``data`` (``prompt`` plus the reward's columns).

    Resumes from the last checkpoint in ``work_dir`` when there is one, else from ``resume_from``
    (a checkpoint of this same run, at the end of epoch ``until_epoch - 1``), else starts afresh.
    ``until_epoch`` stops after that epoch; a checkpoint whose global step is exactly that epoch's
    end is returned as is (a job killed after its last save). Epoch ends are counted in optimizer
    steps (:func:`steps_per_epoch`), never by rounding TRL's fractional epoch.
    """
    from datasets import Dataset

    from mialab.lm.loading import load_causal_lm, load_tokenizer, resolve_device

    if "prompt" not in data.columns:
        raise KeyError(f"the GRPO training set needs a 'prompt' column; it has {list(data.columns)}")
    epoch_steps = steps_per_epoch(len(data), settings, int(os.environ.get("WORLD_SIZE", "1")))
    total = settings.max_steps if settings.max_steps > 0 else settings.epochs * epoch_steps
    target = total if until_epoch is None else until_epoch * epoch_steps
    if target > total:
        raise ValueError(f"epoch {until_epoch} ends at step {target}, after the run's last step {total} "
                         f"({settings.epochs} epochs of {epoch_steps} steps, max_steps {settings.max_steps})")
    start = last_checkpoint(work_dir)
    if start is None and resume_from is not None:
        start = resume_from
        if until_epoch is not None and checkpoint_state(start).global_step != target - epoch_steps:
            raise ValueError(f"{start} is at step {checkpoint_state(start).global_step}, not at the end of epoch "
                             f"{until_epoch - 1} (step {target - epoch_steps})")
    if start is not None:
        step = checkpoint_state(start).global_step
        if step == target:
            return GRPORun.of(start, target)
        if step > target:
            raise ValueError(f"{start} is at step {step}, past this run's target step {target}")
    device = resolve_device(device)
    trainer_cls, epoch_checkpoints, finite_gradients = _trainer_class()
    args = grpo_config(settings, work_dir, device=device)
    trainer = trainer_cls(
        model=load_causal_lm(model_path, dtype=dtype, device="cpu", trust_remote_code=trust_remote_code),
        reward_funcs=list(reward) if isinstance(reward, (list, tuple)) else [reward],
        args=args, train_dataset=Dataset.from_pandas(data.reset_index(drop=True), preserve_index=False),
        processing_class=load_tokenizer(model_path, padding_side="left", trust_remote_code=trust_remote_code),
        peft_config=lora_config(settings.lora) if settings.lora else None,
        callbacks=[finite_gradients(), epoch_checkpoints(epoch_steps, total, target), *(callbacks or [])],
        max_prompt_length=settings.max_prompt_length, entropy_coeff=settings.entropy_coeff,
        entropy_aggregation=settings.entropy_aggregation, policy_loss_scale=settings.policy_loss_scale,
        prompt_special_tokens=settings.prompt_special_tokens,
    )
    # a resumed checkpoint of this job's own work folder is moved aside if refused; another job's is its output
    with (refusing_pickled_code(start, move_aside=Path(start).parent == Path(work_dir)) if start is not None
          else contextlib.nullcontext()):
        trainer.train(resume_from_checkpoint=start)
    final = last_checkpoint(work_dir)
    if final is None:
        raise RuntimeError(f"GRPO wrote no checkpoint to {work_dir}")
    return GRPORun.of(final, target)


def export_checkpoint(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *, init: str | None = None,
                      trust_remote_code: bool = False) -> None:
    """Save a trainer checkpoint's policy as a standalone model folder with its tokenizer; a LoRA
    checkpoint's adapter is merged into the run's ``init`` model (``trust_remote_code``: the init
    model's config setting, which its checkpoints share)."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    from mialab.lm.loading import check_remote_code, load_causal_lm

    check_remote_code(str(checkpoint), trust_remote_code)  # before anything is loaded (its tokenizer too)
    if (Path(checkpoint) / "adapter_config.json").exists():
        if init is None:
            raise ValueError(f"{checkpoint} holds a LoRA adapter: exporting it needs the run's init model")
        model = PeftModel.from_pretrained(load_causal_lm(init, device="cpu", trust_remote_code=trust_remote_code),
                                          str(checkpoint)).merge_and_unload()
    else:
        model = load_causal_lm(str(checkpoint), device="cpu", trust_remote_code=trust_remote_code)
    model.config.use_cache = True
    model.save_pretrained(str(out_dir), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(checkpoint), trust_remote_code=trust_remote_code).save_pretrained(str(out_dir))
