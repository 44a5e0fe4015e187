"""DPDLLM's reference model (Zhou et al. 2024, ``train_detector.py`` / ``run_detection.py``).

DPDLLM fine-tunes a GPT-2 to memorise the detection texts (no labels are read), then reads, for a
text the target produced (its prompt followed by the target's sampled continuation), the reference
model's probability of each token given the tokens before it (``cond_prob``), position by position.
A continuation that reproduces a memorised text gets high probabilities.

Packing, as ``GPT2CausalLMPreprocessor(sequence_length=length)`` packs a text: the start token,
the text's first ``length - 1`` tokens and the end token; inputs are that sequence without its
last token, targets without its first, so a text gives up to ``length`` target positions. The
feature vector has ``length`` entries; positions after a short text's end token are 0 (the
original reads the padding token's probability there; at the code's prompt and continuation
lengths no text is that short).

Fine-tuning as the code: 15 epochs over the texts in their given order (no shuffling), batches of
4, Adam with a learning rate decaying linearly from 5e-5 to 0 over all steps, mean cross-entropy
over the non-padding targets, the model's own dropout; the epoch with the lowest training
perplexity is kept (the code's best-only checkpoint on ``perplexity``). Seeded and deterministic on CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mialab.lm.loading import load_causal_lm, load_lm, load_tokenizer
from mialab.lm.logprobs import token_logprobs


@dataclass(frozen=True)
class FinetuneConfig:
    """DPDLLM's reference fine-tuning: ``calibdcd.detectors.dpdllm.finetune`` (the schema fills its defaults,
    ``train_detector.py``'s)."""

    epochs: int
    batch_size: int
    lr: float
    seed: int


def special_ids(tok) -> tuple[int, int]:
    """(start, end) token ids; a tokenizer without a BOS token starts with its EOS (as GPT-2 does)."""
    if tok.eos_token_id is None:
        raise ValueError("the reference tokenizer has no end-of-text token")
    return (tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id), tok.eos_token_id


def pack(token_ids: Sequence[int], length: int, start: int, end: int) -> list[int]:
    """``[start] + token_ids[:length - 1] + [end]``: DPDLLM's packed sequence (``length + 1`` at most)."""
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    return [start, *list(token_ids)[:length - 1], end]


def packed_rows(tok, parts: Sequence[Sequence[str]], length: int) -> list[list[int]]:
    """Each row's pieces tokenised separately (no special tokens), concatenated and packed, so token
    boundaries never straddle two pieces (e.g. a prompt and the target's continuation)."""
    start, end = special_ids(tok)
    rows = []
    for pieces in parts:
        ids = [t for piece in pieces for t in tok(piece, add_special_tokens=False)["input_ids"]]
        rows.append(pack(ids, length, start, end))
    return rows


def _batches(rows: list[list[int]], batch_size: int, pad: int):
    """``(ids, mask)`` right-padded tensors of consecutive rows."""
    import torch

    for s in range(0, len(rows), batch_size):
        batch = rows[s:s + batch_size]
        width = max(map(len, batch))
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        yield ids, mask


def finetune_reference(base_model: str, texts: Sequence[str], output: str, *, length: int,
                       config: FinetuneConfig, device: str = "auto") -> dict:
    """Fine-tune ``base_model`` on ``texts`` (DPDLLM's memorisation step) and save the best epoch to
    ``output`` (a Hugging Face folder, safetensors, written atomically); returns the training log."""
    import torch
    import torch.nn.functional as F

    from mialab.core.io import atomic_directory

    if not texts:
        raise ValueError("no text to fine-tune the DPDLLM reference model on")
    if config.epochs < 1 or config.batch_size < 1 or config.lr <= 0:
        raise ValueError(f"invalid reference fine-tuning settings {config}")
    tok = load_tokenizer(base_model)
    rows = packed_rows(tok, [[t] for t in texts], length)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = load_causal_lm(base_model, dtype="float32", device=device)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=config.lr, eps=1e-7)   # Keras Adam's epsilon
        steps = config.epochs * math.ceil(len(rows) / config.batch_size)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / steps)
        perplexity, best, best_state = [], math.inf, None
        for _ in range(config.epochs):
            total, count = 0.0, 0
            for ids, mask in _batches(rows, config.batch_size, tok.pad_token_id):
                ids, mask = ids.to(model.device), mask.to(model.device)
                logits = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1]).logits
                weight = mask[:, 1:].float()
                ce = F.cross_entropy(logits.float().transpose(1, 2), ids[:, 1:], reduction="none")
                loss = (ce * weight).sum() / weight.sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                total += loss.item() * len(ids)   # Keras' Perplexity: batch means weighted by batch size
                count += len(ids)
            perplexity.append(math.exp(total / count))
            if perplexity[-1] < best:
                best = perplexity[-1]
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    model.eval()
    with atomic_directory(output) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    return {"texts": len(texts), "steps": steps, "perplexity": [round(p, 4) for p in perplexity],
            "best_epoch": int(np.argmin(perplexity)) + 1}


def reference_probabilities(reference_model: str, parts: Sequence[Sequence[str]], *, length: int,
                            device: str = "auto", dtype: str = "float32") -> np.ndarray:
    """DPDLLM's ``cond_prob`` features (rows x ``length``): the reference model's probability of each
    packed target token given the tokens before it; 0 after a short row's end token."""
    model, tok = load_lm(reference_model, device=device, dtype=dtype)
    rows = packed_rows(tok, parts, length)
    z = np.zeros((len(rows), length), dtype=np.float64)
    for i, logp in enumerate(token_logprobs(model, rows)):
        z[i, :len(logp)] = np.exp(logp)
    return z
