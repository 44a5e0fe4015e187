"""SFT contamination with DeepSpeed ZeRO-2: fine-tune a checkpoint on member texts mixed into filler.

As in the ADRA paper's controlled-contamination setting, the member examples make up
``contamination_rate`` of the SFT examples (members counted with their repeats); the rest is
filler drawn from a corpus that holds no evaluation candidate. Without members the stage is plain
post-training (e.g. ``format: chat``: instruction tuning on (user, assistant) pairs rendered by the
tokenizer's chat template, the post-training shift CalibDCD calibrates). With ``format: chat`` the
members too are conversations, (prefix, suffix) in the chat template (:func:`member_texts`). The same
loop runs on one CPU process (``DS_ACCELERATOR=cpu``, gloo) and on 8 GPUs (NCCL, bf16) under
``torchrun``/``deepspeed``.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from mialab.core.io import grant_umask_mode, remove_stale_temporaries
from mialab.core.progress import console, progress
from mialab.core.settings import settings_from
from mialab.training.checkpoints import (
    checkpoint_path,
    is_due,
    latest_checkpoint,
    load_state,
    prune_checkpoints,
    refusing_pickled_code,
    restore_rng_state,
    rng_state,
    save_state,
)


def filler_count(member_examples: int, rate: float) -> int:
    """The filler examples that make ``member_examples`` member examples ``rate`` of the SFT examples (rounded; the
    released data_mixer.py's ceil of the same count in percent: equal at the paper's 10%)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"contamination_rate must be in (0, 1], got {rate}")
    return int(round(member_examples * (1.0 - rate) / rate))


def mixer_draw(n: int, size: int, seed: int) -> list[int]:
    """The released ``data_mixer.py``'s draw of ``size`` of ``n`` rows: ``random.Random(seed).sample`` of their
    positions, sorted (its contamination and general examples); all of them when ``size >= n``, as there."""
    return sorted(random.Random(seed).sample(range(n), size)) if size < n else list(range(n))


def build_sft_corpus(member_texts: list[str], filler_texts: list[str], *, repeats: int, rate: float,
                     seed: int) -> tuple[list[str], dict]:
    """Members × ``repeats`` plus enough filler for the member share to equal ``rate``; shuffled.

    Filler is drawn without replacement, cycling through a reshuffled corpus if it is too small.
    """
    rng = random.Random(seed)
    members = list(member_texts) * int(repeats)
    n_filler = filler_count(len(members), rate)
    if n_filler and not filler_texts:
        raise ValueError("SFT filler corpus is empty but the contamination rate needs filler examples")
    filler: list[str] = []
    while len(filler) < n_filler:
        batch = list(filler_texts)
        rng.shuffle(batch)
        filler.extend(batch[: n_filler - len(filler)])
    examples = members + filler
    rng.shuffle(examples)
    stats = {"n_members": len(member_texts), "member_examples": len(members), "filler_examples": len(filler),
             "contamination_rate": len(members) / max(1, len(examples))}
    return examples, stats


#: the learning-rate schedules after the warmup: a linear decay to 0, or constant
SCHEDULES = ("linear", "constant")


def build_post_training_corpus(filler_texts: list[str], *, seed: int) -> tuple[list[str], dict]:
    """Post-training without contamination (no members): every filler example once, shuffled."""
    if not filler_texts:
        raise ValueError("post-training corpus is empty")
    examples = list(filler_texts)
    random.Random(seed).shuffle(examples)
    return examples, {"n_members": 0, "member_examples": 0, "filler_examples": len(examples),
                      "contamination_rate": 0.0}


def chat_filler(tokenizer, spec: dict, rows: Callable[[int], list[int]] | None = None) -> list[str]:
    """The filler of a ``format: chat`` entry, rendered by the tokenizer's chat template: with two ``columns``,
    each (user, assistant) pair (:func:`read_chat_pairs`); with one, each row's conversation as it is, a list of
    ``{role, content}`` turns such as the Tulu SFT mixes' ``messages`` (:func:`read_conversations`), which is
    how the released ADRA code's ``adra/utils_rl/data_mixer.py`` renders its general examples (lines 555-568).
    ``rows(n)``: the positions of the ``n`` rows to keep, drawn before rendering (as the mixer draws); None: all."""
    if len(spec.get("columns", [])) == 1:
        return render_conversations(tokenizer, kept(read_conversations(spec), rows))
    return render_chat(tokenizer, kept(read_chat_pairs(spec), rows))


def kept(items: list, rows: Callable[[int], list[int]] | None) -> list:
    return items if rows is None else [items[i] for i in rows(len(items))]


def read_conversations(spec: dict) -> list[list[dict]]:
    """The conversations of a filler table's one column (``columns: [messages]``), its ``where`` rows; a cell
    that is not a list of ``{role, content}`` turns is an error naming the source and the row."""
    from mialab.data.corpus import corpus_rows
    from mialab.data.sources import column_values, describe

    column, source = spec["columns"][0], spec["source"]
    conversations = []
    for row, turns in enumerate(column_values(corpus_rows(spec), column, source=source)):
        try:
            conversations.append([{"role": str(t["role"]), "content": str(t["content"])} for t in turns])
        except (KeyError, TypeError):
            raise ValueError(f"{describe(source)}: column {column!r}, row {row}: not a conversation (a list of "
                             f"{{role, content}} turns): {str(turns)[:80]!r}") from None
    return conversations


def render_conversations(tokenizer, conversations: list[list[dict]]) -> list[str]:
    """Each conversation rendered by the tokenizer's chat template; one the template refuses (a role it does not
    know) is left out and counted in the log, as data_mixer.py leaves it out (lines 559-568)."""
    from jinja2 import TemplateError

    if tokenizer.chat_template is None:
        raise ValueError("format 'chat' needs a tokenizer with a chat template")
    texts = []
    for turns in conversations:
        try:
            texts.append(tokenizer.apply_chat_template(turns, tokenize=False))
        except TemplateError:
            continue
    if len(texts) < len(conversations):
        console.log(f"SFT filler: left out {len(conversations) - len(texts)} of {len(conversations)} conversations "
                    "the chat template refuses")
    return texts


def read_chat_pairs(spec: dict) -> list[tuple[str, str]]:
    """(user, assistant) pairs of a filler table whose ``columns`` name the user and the assistant column.

    Read with :func:`mialab.data.corpus.read_corpus` (same rows, ``where`` and whitespace rules);
    ``max_words`` caps the assistant turn only.
    """
    from mialab.data.corpus import read_corpus

    columns = spec.get("columns", [])
    if len(columns) != 2:
        raise ValueError(f"format 'chat' needs filler columns [user, assistant] (or [conversation]), got {columns}")
    users = read_corpus({**spec, "columns": [columns[0]], "max_words": None})
    assistants = read_corpus({**spec, "columns": [columns[1]]})
    return list(zip(users, assistants, strict=True))


def render_chat(tokenizer, pairs: list[tuple[str, str]]) -> list[str]:
    """Each (user, assistant) pair as one conversation rendered by the tokenizer's chat template
    (instruction tuning: the model learns the template's turn markers and to end its turn)."""
    if tokenizer.chat_template is None:
        raise ValueError("format 'chat' needs a tokenizer with a chat template")
    return [tokenizer.apply_chat_template([{"role": "user", "content": u}, {"role": "assistant", "content": a}],
                                          tokenize=False) for u, a in pairs]


def member_texts(pool, tokenizer=None) -> list[str]:
    """The member (label-1) SFT examples of a pool: its plain ``text``, or with ``tokenizer`` (``format: chat``)
    each (``prefix``, ``suffix``) as one conversation by :func:`render_chat`.

    Chat is the released code's contamination SFT (AIME / Olympiad problem -> solution, S1 question ->
    attempt, rendered by the model's chat template): there the rendered text is TRL's ``text`` field, so
    the loss covers every token, prompt included, as here.
    """
    members = pool.loc[pool["label"] == 1]
    if tokenizer is None:
        return members["text"].tolist()
    return render_chat(tokenizer, list(zip(members["prefix"], members["suffix"], strict=True)))


def stage_corpus(spec: dict, member_pools: list, tokenizer=None, *, seed: int) -> tuple[list[str], dict]:
    """Rule ``sft_contaminate``'s examples and corpus statistics: the entry's filler (plain, or with ``tokenizer``
    chat-rendered) plus, when the entry has ``members``, the members of its one pool at ``contamination_rate``.

    ``draw`` (the released ``data_mixer.py``'s): ``members`` of the pool's members (in its row order) drawn with
    ``member_seed`` (its contamination_size and contamination_seed), and the filler rows the rate needs drawn with
    ``filler_seed`` (its general_seed) before rendering (:func:`mixer_draw`); absent: every member, the filler
    shuffled whole."""
    from mialab.data.corpus import read_corpus

    draw = spec.get("draw")
    if not spec.get("members"):
        filler = read_corpus(spec["filler"]) if tokenizer is None else chat_filler(tokenizer, spec["filler"])
        return build_post_training_corpus(filler, seed=seed)
    (pool,) = member_pools
    members = member_texts(pool, tokenizer)
    rows = None
    if draw:
        members = [members[i] for i in mixer_draw(len(members), draw["members"], draw["member_seed"])]
        need = filler_count(len(members) * spec["members"]["repeats"], spec["contamination_rate"])

        def rows(n: int) -> list[int]:
            return mixer_draw(n, need, draw["filler_seed"])
    filler = (kept(read_corpus(spec["filler"]), rows) if tokenizer is None
              else chat_filler(tokenizer, spec["filler"], rows))
    return build_sft_corpus(members, filler, repeats=spec["members"]["repeats"],
                            rate=spec["contamination_rate"], seed=seed)


def deepspeed_config(*, micro_batch_size: int, grad_accum: int, lr: float, warmup_steps: int, total_steps: int,
                     zero_stage: int, precision: str, grad_clip: float, weight_decay: float,
                     schedule: str) -> dict:
    """A DeepSpeed config: ZeRO stage, torch's AdamW, a linear warmup then (``schedule``) a linear decay to 0 or a
    constant rate (DeepSpeed's WarmupDecayLR / WarmupLR: transformers' linear / constant schedules), bf16 or fp32.

    DeepSpeed's schedule needs at least one warmup step; no warmup is expressed as one step that
    already starts at the full learning rate.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown SFT schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    no_warmup = warmup_steps == 0
    warmup = {"warmup_min_lr": lr if no_warmup else 0.0, "warmup_max_lr": lr, "warmup_num_steps": max(1, warmup_steps),
              "warmup_type": "linear"}
    return {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": grad_clip,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": precision == "bf16"},
        # torch's AdamW (ZeRO shards its state as for any optimizer): DeepSpeed's FusedAdam is a
        # JIT-compiled op, compiled in every fresh environment for no gain at this size
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": [0.9, 0.999], "eps": 1e-8,
                                                    "weight_decay": weight_decay, "torch_adam": True}},
        "scheduler": ({"type": "WarmupDecayLR", "params": {**warmup,
                                                            "total_num_steps": max(total_steps, warmup_steps + 1)}}
                      if schedule == "linear" else {"type": "WarmupLR", "params": warmup}),
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }


@dataclass
class SFTRun:
    """A finished :func:`run_sft`: optimizer steps DeepSpeed completed, the steps the run asks for,
    and the loss of every micro-step (those before a resume included)."""

    steps: int
    expected_steps: int
    losses: list[float] = field(repr=False)


@dataclass(frozen=True)
class SFTSettings:
    """An SFT run: a ``kind: sft`` model's ``train`` section (the schema fills its defaults; ``schedule``:
    :data:`SCHEDULES`, after a linear warmup)."""

    epochs: int
    lr: float
    effective_batch_size: int
    micro_batch_size: int
    max_length: int
    warmup: float
    schedule: str
    precision: str
    zero_stage: int
    grad_clip: float
    weight_decay: float
    checkpoint_every: int
    seed: int

    @classmethod
    def from_config(cls, spec: dict) -> SFTSettings:
        """Settings from a validated ``train`` section; an unknown key is an error naming it and the known ones."""
        return settings_from(cls, spec, "SFT")


def run_sft(init_path: str, texts: list[str], out_dir: str, settings: SFTSettings, *,
            checkpoint_dir: str | None = None, trust_remote_code: bool = False) -> SFTRun:
    """Fine-tune ``init_path`` on ``texts`` with DeepSpeed; rank 0 saves the model to ``out_dir``.

    With ``checkpoint_dir`` a DeepSpeed checkpoint (ZeRO-partitioned optimizer state, scheduler)
    plus each rank's RNG states and data position is written there every ``checkpoint_every``
    optimizer steps, and the run resumes from the last one (:func:`save_sft_checkpoint`).
    """
    import deepspeed
    import numpy as np
    import torch
    import torch.distributed as dist

    from mialab.lm.loading import check_bf16_speed, load_causal_lm, load_tokenizer, resolve_precision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = resolve_precision(settings.precision, device)
    check_bf16_speed(precision, device)
    torch.manual_seed(settings.seed)
    if torch.cuda.is_available():  # one GPU per process, known to NCCL before its first collective
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if settings.effective_batch_size % (settings.micro_batch_size * world):
        raise ValueError(f"effective_batch_size {settings.effective_batch_size} is not a multiple of "
                         f"micro_batch_size {settings.micro_batch_size} x {world} processes")
    grad_accum = settings.effective_batch_size // (settings.micro_batch_size * world)

    # trust_remote_code: the init model's models.<name>.trust_remote_code
    tok = load_tokenizer(init_path, padding_side="right", trust_remote_code=trust_remote_code)
    model = load_causal_lm(init_path, dtype="float32", device="cpu", trust_remote_code=trust_remote_code)
    enc = tok(texts, truncation=True, max_length=settings.max_length)["input_ids"]
    enc = [e + [tok.eos_token_id] if len(e) < settings.max_length else e for e in enc]

    steps_per_epoch = math.ceil(len(enc) / settings.effective_batch_size)
    total_steps = steps_per_epoch * settings.epochs
    warmup_steps = int(settings.warmup * total_steps) if settings.warmup < 1 else int(settings.warmup)
    cfg = deepspeed_config(micro_batch_size=settings.micro_batch_size, grad_accum=grad_accum, lr=settings.lr,
                           warmup_steps=warmup_steps, total_steps=total_steps, zero_stage=settings.zero_stage,
                           precision=precision, grad_clip=settings.grad_clip,
                           weight_decay=settings.weight_decay, schedule=settings.schedule)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    refuse_pickled_code(engine)
    device = engine.device

    rng = np.random.default_rng(settings.seed)
    losses: list[float] = []
    n_micro = steps_per_epoch * grad_accum
    first_epoch, first_micro, order = 0, 0, None
    resume = latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
    if resume is not None:
        with refusing_pickled_code(resume):
            engine.load_checkpoint(str(resume.parent), tag=resume.name, load_module_strict=True,
                                   load_optimizer_states=True, load_lr_scheduler_states=True)
        doc, tensors = load_state(resume, f"client-{rank}")
        restore_rng_state(rng, doc, tensors)
        first_epoch, first_micro, losses, order = doc["epoch"], doc["micro"], doc["losses"], tensors["order"].numpy()
        if rank == 0:
            console.log(f"resuming SFT from {resume} (step {engine.global_steps} of {total_steps})")
    engine.train()
    with progress() as prog:
        task = prog.add_task("sft", total=settings.epochs * n_micro, completed=len(losses)) if rank == 0 else None
        for epoch in range(first_epoch, settings.epochs):
            if epoch != first_epoch or order is None:
                order = rng.permutation(len(enc))
            for m in range(first_micro if epoch == first_epoch else 0, n_micro):
                # micro-batch m of this rank: a strided slice of the epoch's permutation
                start = (m * world + rank) * settings.micro_batch_size
                idx = [order[(start + j) % len(order)] for j in range(settings.micro_batch_size)]
                batch = tok.pad({"input_ids": [enc[i] for i in idx]}, return_tensors="pt")
                ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
                labels = ids.masked_fill(mask == 0, -100)
                loss = engine(input_ids=ids, attention_mask=mask, labels=labels).loss
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"SFT loss is {loss.item()} (epoch {epoch}, micro-step {m})")
                engine.backward(loss)
                engine.step()
                losses.append(loss.item())
                if rank == 0:
                    prog.advance(task)
                    if m % 50 == 0:
                        console.log(f"epoch {epoch} micro-step {m}/{n_micro} loss {losses[-1]:.4f}")
                done = epoch * n_micro + m + 1  # micro-steps done
                if checkpoint_dir and done % grad_accum == 0 and is_due(done // grad_accum,
                                                                         settings.checkpoint_every, total_steps):
                    save_sft_checkpoint(engine, checkpoint_dir, done // grad_accum, rng, order=order,
                                        epoch=epoch, micro=m + 1, losses=losses)
            if rank == 0:
                console.log(f"epoch {epoch} mean loss {np.mean(losses[-n_micro:]):.4f}")
    if rank == 0:
        engine.module.save_pretrained(out_dir, safe_serialization=True)
        tok.save_pretrained(out_dir)
    dist.barrier()
    return SFTRun(steps=int(engine.global_steps), expected_steps=total_steps, losses=losses)


def refuse_pickled_code(engine) -> None:
    """Make DeepSpeed read checkpoints with torch's ``weights_only`` unpickler: tensors, containers
    and plain values only, so a checkpoint folder cannot run code when a job resumes from it."""
    import torch
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    allowed = [LossScaler, ZeroStageEnum, fragment_address]  # DeepSpeed's own state records: data, no code

    def load(path, map_location=None):
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location=map_location, weights_only=True)

    engine.checkpoint_engine.load = load


def save_sft_checkpoint(engine, root: str, step: int, rng, *, order, epoch: int, micro: int,
                        losses: list[float]) -> None:
    """Every rank writes its part of the state after optimizer step ``step`` to ``root/step-<step>/``.

    DeepSpeed's ``save_checkpoint`` (model, ZeRO optimizer partitions, scheduler) plus each rank's
    ``client-<rank>`` state (RNG states, the epoch's data order, the next micro-step, the losses)
    go to a temporary folder of a name every rank knows; rank 0 renames it into place once all are
    done, then deletes the older checkpoints.
    """
    import torch
    import torch.distributed as dist

    final = checkpoint_path(root, step)
    tmp = final.with_name(f".{final.name}.deepspeed.tmp")
    rank = dist.get_rank()
    if rank == 0:
        remove_stale_temporaries(final)  # a checkpoint write killed midway
    dist.barrier()
    engine.save_checkpoint(str(root), tag=tmp.name, save_latest=False)
    doc, tensors = rng_state(rng)
    save_state(tmp, f"client-{rank}", {**doc, "epoch": epoch, "micro": micro, "losses": losses},
               {**tensors, "order": torch.from_numpy(order.copy())})
    dist.barrier()
    if rank == 0:
        grant_umask_mode(tmp)
        os.replace(tmp, final)
        prune_checkpoints(root, keep=final)
    dist.barrier()
