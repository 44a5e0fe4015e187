"""Per-token statistics of a causal LM on a batch of texts, the input of every passive baseline.

For each text and each predicted token t (the first token has no prediction and is skipped):
``logp[t]`` = log p(x_t | x_<t); ``mu[t]`` = E_{z~p}[log p(z)] and ``sigma[t]`` =
sqrt(E_{z~p}[log p(z)^2] - mu^2), the mean and standard deviation of log p over the whole
vocabulary under p itself (what Min-K%++ normalises with).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TokenStats:
    """Per-token arrays for one text (all of length ``n_tokens - 1``)."""

    logp: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray


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


def token_stats(model, tokenizer, texts: list[str], *, batch_size: int = 16, max_length: int = 512,
                description: str = "scoring") -> list[TokenStats]:
    """Score ``texts`` in batches (sorted by length to limit padding); results in input order."""
    import torch

    from mialab.progress import progress

    if tokenizer.padding_side != "right":
        tokenizer.padding_side = "right"
    device = next(model.parameters()).device
    lengths = [len(t) for t in texts]
    order = np.argsort(lengths, kind="stable")[::-1]
    results: list[TokenStats | None] = [None] * len(texts)
    with progress() as prog, torch.inference_mode():
        task = prog.add_task(description, total=len(texts))
        for start in range(0, len(texts), batch_size):
            idx = order[start:start + batch_size]
            enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True, truncation=True,
                            max_length=max_length).to(device)
            logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
            for i, st in zip(idx, stats_from_logits(logits, enc["input_ids"], enc["attention_mask"])):
                if len(st.logp) == 0:
                    raise ValueError(f"text {i} has fewer than two tokens; nothing to score")
                results[i] = st
            prog.advance(task, len(idx))
    return results  # type: ignore[return-value]
