"""The one log-probability forward of the package, and the per-token statistics it feeds.

:func:`map_logprobs` runs a causal LM over token-id rows, each row alone, and hands each row's
log-softmax over the vocabulary to a per-row reduction; :func:`token_logprobs` (``log p`` of the
realised tokens: LaRA, DPDLLM's reference model), :func:`token_stats` (the passive baselines) and
VeilProbe's key-token perturbation (:mod:`mialab.calibdcd.perturb`) are such reductions.

Each row alone, because a text's scores must not depend on which texts share its batch: in a padded
batch they do, in bf16 visibly (docs/conventions.md). The kernels' summation order follows the
shapes they are given: the attention kernel's over the padded length, and a matrix product's over
the number of rows it multiplies (the batch's rows times their padded length), so padding a row to
its neighbours' length, or putting it beside more rows, rounds its logits differently. Padding each
row to a length of its own (buckets) removes the first but not the second. A forward pass of exactly
the row's tokens (no padding, no attention mask, no other row: what MIMIR's and Min-K%++'s code run)
has shapes given by the text alone, so its logits are those of the text and the model (on one device,
with one number of threads, which the rules pin).

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


def map_logprobs(model, rows: Sequence[Sequence[int]], reduce: Callable, *,
                 description: str = "log-probabilities", together: Sequence | None = None) -> list:
    """``reduce(logp, targets)`` of every token-id row, in input order: ``logp`` ``[n - 1, vocab]`` the
    float32 log-softmax predicting the row's tokens 1..n-1, ``targets`` those tokens (both on the model's
    device, inside ``torch.inference_mode``, so ``reduce`` may edit ``logp`` in place).

    Each row is its own forward pass (module docstring), longest first, so a row too long for memory
    fails at once. ``description``: the progress bar's label. ``together``: a key per row; rows of one key
    and one length share a pass, stacked without padding, at most :data:`PASS_TOKENS` tokens a pass, in
    input order: for rows that one text determines (its neighbours), whose results then depend on that text
    alone (and its number of rows of that length), never on another text's rows.
    """
    import torch

    from mialab.core.progress import progress

    limit = getattr(model.config, "max_position_embeddings", None)
    longest = max((len(r) for r in rows), default=0)
    if limit is not None and longest > limit:
        raise ValueError(f"a row has {longest} tokens, more than the model's {limit} positions")
    if not all(len(r) for r in rows):
        raise ValueError(f"row {[len(r) for r in rows].index(0)} has no token (an empty text and no BOS?)")
    device = next(model.parameters()).device
    out: list = [None] * len(rows)
    with progress() as prog, torch.inference_mode():
        task = prog.add_task(description, total=len(rows))
        for batch in _passes(rows, together):
            ids = torch.tensor([list(rows[i]) for i in batch], device=device)
            logits = model(input_ids=ids).logits[:, :-1]
            for b, i in enumerate(batch):
                out[i] = reduce(torch.log_softmax(logits[b].float(), dim=-1), ids[b, 1:])
            prog.advance(task, len(batch))
    return out


#: the most tokens a stacked pass of :func:`map_logprobs`'s ``together`` rows holds (its logits: this many
#: vocabulary rows)
PASS_TOKENS = 4096


def _passes(rows: Sequence[Sequence[int]], together: Sequence | None) -> list[list[int]]:
    """The row indices of each forward pass, longest rows first: each row alone, or (``together``) the rows
    of one key and one length in input order, cut at :data:`PASS_TOKENS` tokens."""
    if together is None:
        return [[i] for i in sorted(range(len(rows)), key=lambda i: -len(rows[i]))]
    if len(together) != len(rows):
        raise ValueError(f"together: {len(together)} keys for {len(rows)} rows")
    groups: dict = {}
    for i, key in enumerate(together):
        groups.setdefault((key, len(rows[i])), []).append(i)
    out = []
    for (_, n), members in groups.items():
        size = max(1, PASS_TOKENS // n)
        out += [members[b:b + size] for b in range(0, len(members), size)]
    return sorted(out, key=lambda batch: -len(rows[batch[0]]))


def picked(logp, targets) -> np.ndarray:
    """``log p`` of the realised tokens (float64): the reduction behind :func:`token_logprobs`."""
    return logp.gather(-1, targets[:, None]).squeeze(-1).double().cpu().numpy()


def token_logprobs(model, rows: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """``log p(x_t | x_<t)`` for t = 1..n-1 of each token-id row (float64, length n-1), in input order."""
    return map_logprobs(model, rows, picked)


def vocabulary_stats(logp, targets) -> TokenStats:
    """One row's :class:`TokenStats` from its log-softmax ``[n - 1, vocab]`` and realised tokens."""
    probs = logp.exp()
    mu = (probs * logp).sum(-1)
    sigma = ((probs * logp.square()).sum(-1) - mu.square()).clamp_min(0).sqrt()
    return TokenStats(picked(logp, targets), mu.double().cpu().numpy(), sigma.double().cpu().numpy())


def realised_only(logp, targets) -> TokenStats:
    """One row's :class:`TokenStats` with ``logp`` alone (``mu`` and ``sigma`` empty)."""
    return TokenStats(picked(logp, targets), np.empty(0), np.empty(0))


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


def token_stats(model, tokenizer, texts: list[str], *, max_length: int = 512,
                truncation: str = "truncate", names: list | None = None,
                description: str = "scoring", vocabulary: bool = True,
                together: Sequence | None = None) -> list[TokenStats]:
    """Score ``texts`` with :func:`map_logprobs` (one row per text or window); results in input order.

    Every text is tokenized in full first, so ``error`` fails before the model runs and
    ``truncate`` marks what it cut (``TokenStats.truncated``). ``names``: how errors name the
    texts (their ids; default their positions). ``vocabulary=False``: ``logp`` alone (``mu`` and
    ``sigma`` empty), for a caller that reads no more: the statistics are a pass over the whole
    vocabulary at every token, work that caller would throw away. ``together``: a key per text, passed on
    to :func:`map_logprobs` for the text's rows (texts that one text determines: its neighbours).
    """
    full = tokenizer(texts)["input_ids"]
    lengths = [len(r) for r in full]
    ids = full if truncation != "truncate" else tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    names = list(range(len(texts))) if names is None else list(names)
    short = [i for i, n in enumerate(lengths) if n < 2]
    if short:
        raise ValueError(f"text {names[short[0]]!r} has fewer than two tokens; nothing to score")
    pieces = _pieces(ids, lengths, max_length, truncation, names)
    keys = None if together is None else [together[p[0]] for p in pieces]
    stats = map_logprobs(model, [p[2] for p in pieces], vocabulary_stats if vocabulary else realised_only,
                         description=description, together=keys)
    parts: list[list[tuple[int, int, TokenStats]]] = [[] for _ in texts]
    for (i, w, _, keep), st in zip(pieces, stats):
        parts[i].append((w, keep, st))
    return [_joined(p, truncated=lengths[i] > len(ids[i])) for i, p in enumerate(parts)]


def _joined(parts, truncated: bool) -> TokenStats:
    """One text's statistics from its windows (in order), each contributing its last ``keep``."""
    parts = sorted(parts, key=lambda p: p[0])
    cat = lambda f: np.concatenate([getattr(st, f)[len(st.logp) - keep:] for _, keep, st in parts])
    return TokenStats(cat("logp"), cat("mu"), cat("sigma"), truncated=truncated)
