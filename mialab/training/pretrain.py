"""Pretrain the tiny world's base model (nanoGPT-style loop, readable top to bottom).

The corpus is a filler text (Tiny Shakespeare) cut into paragraph documents, plus the member
texts of the configured datasets, each repeated ``repeats`` times. Documents are shuffled with a
seed, joined with EOS and cut into fixed-length blocks; training draws blocks in seeded epoch
order for a fixed number of steps. With ``repeats: 0`` (or no members) this is the no-members
control, whose membership scores must stay near chance.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from mialab.core.io import atomic_directory, remove_stale_temporaries
from mialab.core.progress import console, progress
from mialab.core.settings import settings_from
from mialab.data.mixing import check_filler
from mialab.lm.loading import check_bf16_speed, no_cudnn_attention, resolve_precision
from mialab.lm.tiny import llama_config
from mialab.training.checkpoints import (
    checkpoint_path,
    is_due,
    latest_checkpoint,
    load_state,
    optimizer_state,
    prune_checkpoints,
    restore_optimizer_state,
    restore_rng_state,
    rng_state,
    save_state,
)


def filler_documents(text: str, max_words: int = 200) -> list[str]:
    """Split a plain-text corpus into paragraph documents of at most ``max_words`` words."""
    docs: list[str] = []
    for para in text.split("\n\n"):
        words = para.split(" ")
        for i in range(0, len(words), max_words):
            chunk = " ".join(words[i:i + max_words]).strip()
            if chunk:
                docs.append(chunk)
    return docs


def build_corpus(filler: list[str], members: list[tuple[list[str], int]], seed: int) -> list[str]:
    """Filler documents plus each member list repeated its number of times, shuffled with ``seed``."""
    docs = list(filler)
    for texts, repeats in members:
        docs.extend(list(texts) * int(repeats))
    random.Random(seed).shuffle(docs)
    return docs


def stage_documents(model: str, filler_text: str, member_pools: list, spec: dict, seed: int) -> tuple[list[str], int]:
    """Rule ``pretrain_model``'s shuffled documents and member-document count: the first ``filler_fraction``
    of the filler's documents (at least one) plus each pool's members (label 1) repeated its ``repeats``."""
    members = [(pool.loc[pool["label"] == 1, "text"].tolist(), m["repeats"])
               for m, pool in zip(spec["members"], member_pools)]
    filler = filler_documents(filler_text)
    filler = filler[: max(1, round(spec["filler_fraction"] * len(filler)))]
    check_filler(model, filler, [t for texts, r in members for t in texts * int(r)])
    return build_corpus(filler, members, seed=seed), sum(len(t) * r for t, r in members)


def stage_config(tokenizer, arch: dict, seq_len: int):
    """The model config of a config entry's ``architecture``, its positions covering ``seq_len``."""
    return llama_config(len(tokenizer), hidden_size=arch["hidden_size"], num_layers=arch["num_layers"],
                        num_heads=arch["num_heads"], intermediate_size=arch.get("intermediate_size"),
                        max_position_embeddings=max(arch["max_position_embeddings"], seq_len), tokenizer=tokenizer)


def stage_record(model, blocks: np.ndarray, member_documents: int, steps: int, losses: list[float]) -> dict:
    """Rule ``pretrain_model``'s manifest statistics: size, corpus, steps and the loss curve."""
    return {"parameters": sum(p.numel() for p in model.parameters()), "blocks": int(len(blocks)),
            "member_documents": member_documents, "steps": steps, "final_loss": losses[-1],
            "loss_curve_every_50": losses[::50]}


def pack_blocks(docs: list[str], tokenizer, seq_len: int, separator: int | None = None) -> np.ndarray:
    """Tokenise documents, join them with ``separator`` (default EOS) and cut into ``[n_blocks, seq_len]``
    token ids."""
    ids: list[int] = []
    sep = tokenizer.eos_token_id if separator is None else separator
    for enc in tokenizer(docs, add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(sep)
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"corpus has {len(ids)} tokens, fewer than one block of {seq_len}")
    return np.asarray(ids[: n * seq_len], dtype=np.int64).reshape(n, seq_len)


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Linear warmup then cosine decay to ``min_lr``."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress_ = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(1.0, progress_)))


@dataclass(frozen=True)
class PretrainSettings:
    """A pretraining run: a ``kind: pretrain`` model's ``train`` section (the schema fills its defaults)."""

    steps: int
    batch_size: int
    seq_len: int
    lr: float
    min_lr: float
    warmup_steps: int
    weight_decay: float
    grad_clip: float
    precision: str
    checkpoint_every: int
    seed: int

    @classmethod
    def from_config(cls, spec: dict) -> PretrainSettings:
        """Settings from a validated ``train`` section; an unknown key is an error naming it and the known ones."""
        return settings_from(cls, spec, "pretraining")


def causal_inputs(batch, rng: np.random.Generator) -> dict:
    """Next-token prediction on every position (the model shifts the labels)."""
    return {"input_ids": batch, "labels": batch}


def pretrain(model, blocks: np.ndarray, settings: PretrainSettings, *,
             checkpoint_dir: str | None = None, inputs=causal_inputs) -> list[float]:
    """Train ``model`` on random batches of ``blocks`` for ``settings.steps`` steps; return the loss curve.

    ``inputs(batch, rng)`` makes the model's arguments of a batch of blocks (default: causal LM;
    :func:`mialab.training.mlm.masked_inputs` for a masked LM), drawing any randomness from ``rng``, whose
    state the checkpoints keep. ``precision="bf16"`` runs forward and backward under bf16 autocast; weights,
    gradients and the optimizer state stay fp32 (mixed precision, as on a GPU); ``auto`` is bf16 where the
    device computes it natively, else fp32. With ``checkpoint_dir`` the
    run is checkpointed every ``checkpoint_every`` steps and resumes from the last checkpoint there
    (:mod:`mialab.training.checkpoints`); the loss curve then holds every step, resumed or not.
    """
    import torch

    steps, batch_size, lr = settings.steps, settings.batch_size, settings.lr
    device = next(model.parameters()).device
    device_type = device.type
    no_cudnn_attention()
    precision = resolve_precision(settings.precision, device_type)
    check_bf16_speed(precision, device_type)

    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    order = rng.permutation(len(blocks))
    cursor, losses, start = 0, [], 0
    resume = latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
    if resume is not None:
        order, cursor, losses, start = _load_checkpoint(resume, model, opt, rng)
        console.log(f"resuming pretraining from {resume} (step {start} of {steps})")
    model.train()
    with progress() as prog:
        task = prog.add_task("pretrain", total=steps, completed=start)
        for step in range(start, steps):
            if cursor + batch_size > len(order):  # next epoch
                order, cursor = rng.permutation(len(blocks)), 0
            batch = torch.from_numpy(blocks[order[cursor:cursor + batch_size]])
            cursor += batch_size
            for group in opt.param_groups:
                group["lr"] = lr_at(step, lr=lr, min_lr=settings.min_lr, warmup_steps=settings.warmup_steps,
                                     total_steps=steps)
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = model(**{k: v.to(device) for k, v in inputs(batch, rng).items()}).loss
            if not torch.isfinite(loss):
                raise FloatingPointError(f"pretraining loss is {loss.item()} at step {step}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            opt.step()
            losses.append(loss.item())
            if step % 50 == 0 or step == steps - 1:
                console.log(f"step {step} loss {loss.item():.4f} lr {opt.param_groups[0]['lr']:.2e}")
            prog.advance(task)
            if checkpoint_dir and is_due(step + 1, settings.checkpoint_every, steps):
                save_checkpoint(checkpoint_dir, step + 1, model, opt, rng, order=order, cursor=cursor, losses=losses)
    model.eval()
    return losses


def save_checkpoint(root: str, step: int, model, opt, rng: np.random.Generator, *, order: np.ndarray, cursor: int,
                    losses: list[float]) -> None:
    """Write the state after ``step`` completed steps to ``root/step-<step>/``; drop the older ones."""
    import torch
    from safetensors.torch import save_model

    final = checkpoint_path(root, step)
    remove_stale_temporaries(final)  # a checkpoint write killed midway
    with atomic_directory(final) as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        save_state(tmp, "optimizer", *optimizer_state(opt))
        doc, tensors = rng_state(rng)
        save_state(tmp, "state", {**doc, "step": step, "cursor": cursor, "losses": losses},
                   {**tensors, "order": torch.from_numpy(np.ascontiguousarray(order))})
    prune_checkpoints(root, keep=final)


def _load_checkpoint(folder, model, opt, rng: np.random.Generator) -> tuple[np.ndarray, int, list[float], int]:
    """Restore a :func:`save_checkpoint` folder into ``model``, ``opt`` and ``rng``; return
    (data order, cursor, losses, completed steps)."""
    from safetensors.torch import load_model

    load_model(model, str(folder / "model.safetensors"))
    restore_optimizer_state(opt, *load_state(folder, "optimizer"))
    doc, tensors = load_state(folder, "state")
    restore_rng_state(rng, doc, tensors)
    return tensors["order"].numpy(), int(doc["cursor"]), list(doc["losses"]), int(doc["step"])
