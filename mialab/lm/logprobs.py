"""Per-token statistics of a causal LM on a batch of texts, the input of every passive baseline.

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


def stats_from_logits(logits, input_ids, attention_mask) -> list[TokenStats]:
    """Turn a padded batch of logits ``[B, T, V]`` into one :class:`TokenStats` per row.

    Works for right padding; positions whose target is padding are dropped. Rows are reduced one
    at a time: the full-vocabulary temporaries of a whole batch (hundreds of MB) would be fresh
    memory on every batch, paid for in page faults.
    """
    import torch

    keep = attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()
    out = []
    for i in range(logits.shape[0]):
        m = keep[i]
        logprobs = torch.log_softmax(logits[i, :-1][m].float(), dim=-1)
        logp = logprobs.gather(-1, input_ids[i, 1:][m].unsqueeze(-1)).squeeze(-1)
        probs = logprobs.exp()
        mu = (probs * logprobs).sum(-1)
        sigma = ((probs * logprobs.square()).sum(-1) - mu.square()).clamp_min(0).sqrt()
        out.append(TokenStats(logp.double().cpu().numpy(), mu.double().cpu().numpy(), sigma.double().cpu().numpy()))
    return out


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
    """Score ``texts`` in batches (sorted by length to limit padding); results in input order.

    Every text is tokenized in full first, so ``error`` fails before the model runs and
    ``truncate`` marks what it cut (``TokenStats.truncated``). ``names``: how errors name the
    texts (their ids; default their positions).
    """
    import torch

    from mialab.core.progress import progress

    full = tokenizer(texts)["input_ids"]
    lengths = [len(r) for r in full]
    ids = full if truncation != "truncate" else tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    names = list(range(len(texts))) if names is None else list(names)
    short = [i for i, n in enumerate(lengths) if n < 2]
    if short:
        raise ValueError(f"text {names[short[0]]!r} has fewer than two tokens; nothing to score")
    pieces = _pieces(ids, lengths, max_length, truncation, names)
    device = next(model.parameters()).device
    chars = [len(texts[p[0]]) for p in pieces]
    order = np.argsort(chars, kind="stable")[::-1]
    parts: list[list[tuple[int, int, TokenStats]]] = [[] for _ in texts]
    pad = tokenizer.pad_token_id
    with progress() as prog, torch.inference_mode():
        task = prog.add_task(description, total=len(pieces))
        for start in range(0, len(pieces), batch_size):
            batch = [pieces[j] for j in order[start:start + batch_size]]
            width = max(len(p[2]) for p in batch)
            input_ids = torch.tensor([p[2] + [pad] * (width - len(p[2])) for p in batch], device=device)
            mask = torch.tensor([[1] * len(p[2]) + [0] * (width - len(p[2])) for p in batch], device=device)
            logits = model(input_ids=input_ids, attention_mask=mask).logits
            for (i, w, _, keep), st in zip(batch, stats_from_logits(logits, input_ids, mask)):
                parts[i].append((w, keep, st))
            prog.advance(task, len(batch))
    return [_joined(p, truncated=lengths[i] > len(ids[i])) for i, p in enumerate(parts)]


def _joined(parts, truncated: bool) -> TokenStats:
    """One text's statistics from its windows (in order), each contributing its last ``keep``."""
    parts = sorted(parts, key=lambda p: p[0])
    cat = lambda f: np.concatenate([getattr(st, f)[len(st.logp) - keep:] for _, keep, st in parts])
    return TokenStats(cat("logp"), cat("mu"), cat("sigma"), truncated=truncated)
