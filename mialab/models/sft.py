"""SFT contamination with DeepSpeed ZeRO-2: fine-tune a checkpoint on member texts mixed into filler.

As in the ADRA paper's controlled-contamination setting, the member examples make up
``contamination_rate`` of the SFT examples (members counted with their repeats); the rest is
filler drawn from a corpus that holds no evaluation candidate. Without members the stage is plain
post-training (e.g. ``format: chat``: instruction tuning on (user, assistant) pairs rendered by the
tokenizer's chat template, the post-training shift CalibDCD calibrates). The same loop runs on one CPU
process (``DS_ACCELERATOR=cpu``, gloo) and on 8 GPUs (NCCL, bf16) under ``torchrun``/``deepspeed``.
"""

from __future__ import annotations

import math
import os
import random

from mialab.progress import console, progress


def build_sft_corpus(member_texts: list[str], filler_texts: list[str], *, repeats: int, rate: float,
                     seed: int) -> tuple[list[str], dict]:
    """Members × ``repeats`` plus enough filler for the member share to equal ``rate``; shuffled.

    Filler is drawn without replacement, cycling through a reshuffled corpus if it is too small.
    """
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"contamination_rate must be in (0, 1], got {rate}")
    rng = random.Random(seed)
    members = list(member_texts) * int(repeats)
    n_filler = int(round(len(members) * (1.0 - rate) / rate))
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


def build_post_training_corpus(filler_texts: list[str], *, seed: int) -> tuple[list[str], dict]:
    """Post-training without contamination (no members): every filler example once, shuffled."""
    if not filler_texts:
        raise ValueError("post-training corpus is empty")
    examples = list(filler_texts)
    random.Random(seed).shuffle(examples)
    return examples, {"n_members": 0, "member_examples": 0, "filler_examples": len(examples),
                      "contamination_rate": 0.0}


def read_chat_pairs(spec: dict) -> list[tuple[str, str]]:
    """(user, assistant) pairs of a filler table whose ``columns`` name the user and the assistant column.

    Read with :func:`mialab.data.corpus.read_corpus` (same rows, ``query`` and whitespace rules);
    ``max_words`` caps the assistant turn only.
    """
    from mialab.data.corpus import read_corpus

    columns = spec.get("columns", [])
    if len(columns) != 2:
        raise ValueError(f"format 'chat' needs filler columns [user, assistant], got {columns}")
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


def deepspeed_config(*, micro_batch_size: int, grad_accum: int, lr: float, warmup_steps: int, total_steps: int,
                     zero_stage: int, precision: str, grad_clip: float, weight_decay: float) -> dict:
    """A DeepSpeed config: ZeRO stage, torch's AdamW, linear warmup-then-decay schedule, bf16 or fp32.

    DeepSpeed's schedule needs at least one warmup step; no warmup is expressed as one step that
    already starts at the full learning rate.
    """
    no_warmup = warmup_steps == 0
    return {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": grad_clip,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": precision == "bf16"},
        # torch's AdamW (ZeRO shards its state as for any optimizer): DeepSpeed's FusedAdam is a
        # JIT-compiled op, ~50 s of compiling in a fresh environment for no gain at this size
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": [0.9, 0.999], "eps": 1e-8,
                                                    "weight_decay": weight_decay, "torch_adam": True}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": lr if no_warmup else 0.0,
                                                           "warmup_max_lr": lr,
                                                           "warmup_num_steps": max(1, warmup_steps),
                                                           "total_num_steps": max(total_steps, warmup_steps + 1),
                                                           "warmup_type": "linear"}},
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }


def run_sft(init_path: str, texts: list[str], out_dir: str, *, epochs: int, lr: float, effective_batch_size: int,
            micro_batch_size: int, max_length: int, warmup: float, zero_stage: int, precision: str,
            grad_clip: float, weight_decay: float, seed: int) -> list[float]:
    """Fine-tune ``init_path`` on ``texts`` with DeepSpeed; rank 0 saves the model to ``out_dir``."""
    import deepspeed
    import numpy as np
    import torch
    import torch.distributed as dist

    from mialab.models.loading import check_bf16_speed, load_tokenizer

    check_bf16_speed(precision, "cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    if torch.cuda.is_available():  # one GPU per process, known to NCCL before its first collective
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if effective_batch_size % (micro_batch_size * world):
        raise ValueError(f"effective_batch_size {effective_batch_size} is not a multiple of "
                         f"micro_batch_size {micro_batch_size} x {world} processes")
    grad_accum = effective_batch_size // (micro_batch_size * world)

    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(init_path, padding_side="right")
    model = AutoModelForCausalLM.from_pretrained(init_path, dtype=torch.float32, use_safetensors=True)
    enc = tok(texts, truncation=True, max_length=max_length)["input_ids"]
    enc = [e + [tok.eos_token_id] if len(e) < max_length else e for e in enc]

    steps_per_epoch = math.ceil(len(enc) / effective_batch_size)
    total_steps = steps_per_epoch * epochs
    warmup_steps = int(warmup * total_steps) if warmup < 1 else int(warmup)
    cfg = deepspeed_config(micro_batch_size=micro_batch_size, grad_accum=grad_accum, lr=lr,
                           warmup_steps=warmup_steps, total_steps=total_steps, zero_stage=zero_stage,
                           precision=precision, grad_clip=grad_clip, weight_decay=weight_decay)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    device = engine.device

    rng = np.random.default_rng(seed)
    losses: list[float] = []
    engine.train()
    n_micro = steps_per_epoch * grad_accum
    with progress() as prog:
        task = prog.add_task("sft", total=epochs * n_micro) if rank == 0 else None
        for epoch in range(epochs):
            order = rng.permutation(len(enc))
            for m in range(n_micro):
                # micro-batch m of this rank: a strided slice of the epoch's permutation
                start = (m * world + rank) * micro_batch_size
                idx = [order[(start + j) % len(order)] for j in range(micro_batch_size)]
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
            if rank == 0:
                console.log(f"epoch {epoch} mean loss {np.mean(losses[-n_micro:]):.4f}")
    if rank == 0:
        engine.module.save_pretrained(out_dir, safe_serialization=True)
        tok.save_pretrained(out_dir)
    dist.barrier()
    return losses
