"""The one batched log-probability forward of the package, and the per-token statistics it feeds.

:func:`map_logprobs` runs a causal LM over token-id rows, sorted by length (longest first, so
a batch too large for memory fails at once) and right-padded, and hands each row's log-softmax
over the vocabulary to a per-row reduction; :func:`token_logprobs` (``log p`` of the realised
tokens: LaRA, DPDLLM's reference model), :func:`token_stats` (the passive baselines) and
VeilProbe's key-token perturbation (:mod:`mialab.calibdcd.perturb`) are such reductions.

For each text and each predicted token t (the first token has no prediction and is skipped):
``logp[t]`` = log p(x_t | x_<t); ``mu[t]`` = E_{z~p}[log p(z)] and ``sigma[t]`` =
sqrt(E_{z~p}[log p(z)^2] - mu^2), the mean and standard deviation of log p over the whole
vocabulary under p itself (what Min-K%++ normalises with).

A text longer than ``max_length`` tokens is handled as ``truncation`` says (:data:`TRUNCATION`):

- ``truncate``: only its first ``max_length`` tokens are scored (one forward pass per text; the
  tokenizer's own truncation), and the text is counted as truncated;
- ``sliding_window``: every token is scored, as MIMIR does (``mimir/models.py:get_probabilities``):
  windows of ``max_length`` tokens advancing by ``stride = max_length // 2``; each window predicts
  only the tokens past the previous window's end, so every token after the first is predicted once,
  with at least ``max_length - stride`` tokens of context once the text is longer than a window;
- ``error``: a clear error naming the text before any model runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

TRUNCATION = ("truncate", "sliding_window", "error")


@dataclass
class TokenStats:
    """Per-token arrays for one text (all of length ``n_tokens - 1``). ``truncated``: the text had
    more tokens than were scored (``truncation: truncate``)."""

    logp: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    truncated: bool = False


def map_logprobs(model, rows: Sequence[Sequence[int]], reduce: Callable, *, pad_token_id: int,
                 batch_size: int = 8, description: str = "log-probabilities") -> list:
    """``reduce(logp, targets)`` of every token-id row, in input order: ``logp`` ``[n - 1, vocab]`` the
    float32 log-softmax predicting the row's tokens 1..n-1, ``targets`` those tokens (both on the model's
    device, inside ``torch.inference_mode``, so ``reduce`` may edit ``logp`` in place).

    Rows run ``batch_size`` at a time, longest first (a stable sort by token length, to limit
    padding), right-padded and masked; each row is reduced on its own, so the full-vocabulary
    temporaries are one row's, not a whole batch's. ``description``: the progress bar's label.
    """
    import torch

    from mialab.core.progress import progress

    limit = getattr(model.config, "max_position_embeddings", None)
    longest = max((len(r) for r in rows), default=0)
    if limit is not None and longest > limit:
        raise ValueError(f"a row has {longest} tokens, more than the model's {limit} positions")
    device = next(model.parameters()).device
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    out: list = [None] * len(rows)
    with progress() as prog, torch.inference_mode():
        task = prog.add_task(description, total=len(rows))
        for start in range(0, len(rows), batch_size):
            batch = [list(rows[i]) for i in order[start:start + batch_size]]
            width = max(len(r) for r in batch)
            ids = torch.tensor([r + [pad_token_id] * (width - len(r)) for r in batch], device=device)
            mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in batch], device=device)
            logits = model(input_ids=ids, attention_mask=mask).logits
            for b, i in enumerate(order[start:start + batch_size]):
                n = max(len(batch[b]) - 1, 0)
                out[i] = reduce(torch.log_softmax(logits[b, :n].float(), dim=-1), ids[b, 1:n + 1])
            prog.advance(task, len(batch))
    return out


def picked(logp, targets) -> np.ndarray:
    """``log p`` of the realised tokens (float64): the reduction behind :func:`token_logprobs`."""
    return logp.gather(-1, targets[:, None]).squeeze(-1).double().cpu().numpy()


def token_logprobs(model, rows: Sequence[Sequence[int]], *, pad_token_id: int, batch_size: int = 8) -> list[np.ndarray]:
    """``log p(x_t | x_<t)`` for t = 1..n-1 of each token-id row (float64, length n-1), in input order."""
    return map_logprobs(model, rows, picked, pad_token_id=pad_token_id, batch_size=batch_size)


def vocabulary_stats(logp, targets) -> TokenStats:
    """One row's :class:`TokenStats` from its log-softmax ``[n - 1, vocab]`` and realised tokens."""
    probs = logp.exp()
    mu = (probs * logp).sum(-1)
    sigma = ((probs * logp.square()).sum(-1) - mu.square()).clamp_min(0).sqrt()
    return TokenStats(picked(logp, targets), mu.double().cpu().numpy(), sigma.double().cpu().numpy())


def sliding_windows(n: int, max_length: int) -> list[tuple[int, int, int]]:
    """``(begin, end, keep)`` of each window over ``n`` tokens: the window is tokens
    ``[begin, end)`` and its last ``keep`` predictions are new (MIMIR's stride ``max_length // 2``).

    The ``keep`` values add up to ``n - 1``: every token but the first is predicted exactly once.
    """
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2, got {max_length}")
    if n <= max_length:
        return [(0, n, n - 1)]
    stride = max_length // 2
    out = []
    for i in range(0, n, stride):
        begin, end = max(i + stride - max_length, 0), min(i + stride, n)
        out.append((begin, end, end - max(i, 1)))
    return out


def _pieces(ids: list[list[int]], full_lengths: list[int], max_length: int, truncation: str, names: list):
    """The sequences to run: ``(text index, window index, token ids, predictions kept from the end)``."""
    if truncation not in TRUNCATION:
        raise ValueError(f"scoring.truncation: unknown mode {truncation!r}; known: {', '.join(TRUNCATION)}")
    pieces = []
    for i, (row, n) in enumerate(zip(ids, full_lengths)):
        if n > max_length and truncation == "error":
            raise ValueError(f"text {names[i]!r} has {n} tokens, more than scoring.max_length = {max_length} "
                             f"(scoring.truncation: error; use truncate or sliding_window to score it)")
        if truncation == "sliding_window":
            pieces += [(i, w, row[b:e], keep) for w, (b, e, keep) in enumerate(sliding_windows(n, max_length))]
        else:
            pieces.append((i, 0, row, len(row) - 1))
    return pieces


def token_stats(model, tokenizer, texts: list[str], *, batch_size: int = 16, max_length: int = 512,
                truncation: str = "truncate", names: list | None = None,
                description: str = "scoring") -> list[TokenStats]:
    """Score ``texts`` with :func:`map_logprobs` (one row per text or window); results in input order.

    Every text is tokenized in full first, so ``error`` fails before the model runs and
    ``truncate`` marks what it cut (``TokenStats.truncated``). ``names``: how errors name the
    texts (their ids; default their positions).
    """
    full = tokenizer(texts)["input_ids"]
    lengths = [len(r) for r in full]
    ids = full if truncation != "truncate" else tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    names = list(range(len(texts))) if names is None else list(names)
    short = [i for i, n in enumerate(lengths) if n < 2]
    if short:
        raise ValueError(f"text {names[short[0]]!r} has fewer than two tokens; nothing to score")
    pieces = _pieces(ids, lengths, max_length, truncation, names)
    stats = map_logprobs(model, [p[2] for p in pieces], vocabulary_stats, pad_token_id=tokenizer.pad_token_id,
                         batch_size=batch_size, description=description)
    parts: list[list[tuple[int, int, TokenStats]]] = [[] for _ in texts]
    for (i, w, _, keep), st in zip(pieces, stats):
        parts[i].append((w, keep, st))
    return [_joined(p, truncated=lengths[i] > len(ids[i])) for i, p in enumerate(parts)]


def _joined(parts, truncated: bool) -> TokenStats:
    """One text's statistics from its windows (in order), each contributing its last ``keep``."""
    parts = sorted(parts, key=lambda p: p[0])
    cat = lambda f: np.concatenate([getattr(st, f)[len(st.logp) - keep:] for _, keep, st in parts])
    return TokenStats(cat("logp"), cat("mu"), cat("sigma"), truncated=truncated)
