"""Benchmark: what scoring each text alone costs, and what a padded batch changed (not a test).

On one torch thread, for a causal LM folder and the repository's WikiMIA-64 texts and AIME problems with
their solutions, per dtype (bf16 only where the CPU computes it natively):

- texts per second of :func:`mialab.lm.logprobs.token_stats` (each text its own forward pass) and of the
  padded batches it replaced (``--batch-size`` texts, longest first, right-padded, the same per-text
  statistics), and their ratio;
- that a text's scores are the same alone and among the others (checked, not timed);
- the largest change of each passive score when a text is scored in those padded batches instead of alone
  (the dependence on batch neighbours the per-text forward removes), when bf16 replaces fp32 (the
  difference docs/conventions.md states), and, for Loss, against MIMIR's own computation (one text
  per forward pass, the log-softmax in the model's dtype: ``mimir/models.py:get_probabilities``).

Usage: python benchmarks/bench_batch_invariance.py --model DIR (e.g. a finished tiny world's
``results/models/base/<key>/model``) [--texts 96] [--batch-size 16] [--max-length 256]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
METHODS, KS = ["loss", "zlib", "min_k", "min_k_plus_plus"], [0.2]


def texts(n: int) -> dict[str, list[str]]:
    """``n`` WikiMIA-64 texts and ``n // 2`` AIME problems with their solutions, in file order."""
    data = REPO / "resources/data"
    wikimia = pd.read_parquet(data / "wikimia/WikiMIA_length64.parquet")["input"].tolist()[:n]
    aime = json.loads((data / "aime/aime_1983_2023.json").read_text())[:n // 2]
    return {"wikimia": wikimia, "aime": [f"{p['problem']} {p['solution']}" for p in aime]}


def padded_batches(model, tok, batch: list[str], *, batch_size: int, max_length: int) -> list:
    """:class:`TokenStats` as scoring computed them before each text had its own forward pass."""
    import torch

    from mialab.lm.logprobs import vocabulary_stats

    rows = tok(batch, truncation=True, max_length=max_length)["input_ids"]
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    out = [None] * len(rows)
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            chunk = order[start:start + batch_size]
            width = max(len(rows[i]) for i in chunk)
            ids = torch.tensor([rows[i] + [tok.pad_token_id] * (width - len(rows[i])) for i in chunk])
            mask = torch.tensor([[1] * len(rows[i]) + [0] * (width - len(rows[i])) for i in chunk])
            logits = model(input_ids=ids, attention_mask=mask).logits
            for b, i in enumerate(chunk):
                n = len(rows[i]) - 1
                out[i] = vocabulary_stats(torch.log_softmax(logits[b, :n].float(), -1), ids[b, 1:n + 1])
    return out


def mimir_loss(model, tok, batch: list[str], max_length: int) -> np.ndarray:
    """Mean token log-likelihood as MIMIR computes it: one text per forward, log-softmax in the model's dtype."""
    import torch

    out = []
    with torch.inference_mode():
        for row in tok(batch, truncation=True, max_length=max_length)["input_ids"]:
            logp = torch.log_softmax(model(input_ids=torch.tensor([row])).logits[0, :-1], -1)
            out.append(logp.gather(-1, torch.tensor(row[1:])[:, None]).double().mean().item())
    return np.array(out)


def timed(fn):
    """``(result, seconds)`` of the faster of two calls."""
    best = None
    for _ in range(2):
        start = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - start
        best = seconds if best is None else min(best, seconds)
    return result, best


def largest(a: dict, b: dict) -> str:
    return ", ".join(f"{c} {np.abs(a[c] - b[c]).max():.2e}" for c in a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--texts", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=256)
    args = ap.parse_args()
    import torch

    from mialab.lm.loading import cpu_has_native_bf16, load_causal_lm, load_tokenizer
    from mialab.lm.logprobs import token_stats
    from mialab.scoring.baselines import score_texts

    torch.set_num_threads(1)
    tok = load_tokenizer(args.model)
    dtypes = ["float32", "bfloat16"] if cpu_has_native_bf16() else ["float32"]
    alone_scores = {}
    for dtype in dtypes:
        model = load_causal_lm(args.model, dtype=dtype, device="cpu")
        for name, batch in texts(args.texts).items():
            scores = lambda stats: score_texts(stats, batch, METHODS, KS)
            own, t_own = timed(lambda: token_stats(model, tok, batch, max_length=args.max_length))
            padded, t_pad = timed(lambda: padded_batches(model, tok, batch, batch_size=args.batch_size,
                                                         max_length=args.max_length))
            each = [token_stats(model, tok, [t], max_length=args.max_length)[0] for t in batch]
            assert all(np.array_equal(a.logp, b.logp) and np.array_equal(a.mu, b.mu) and np.array_equal(a.sigma, b.sigma)
                       for a, b in zip(own, each)), "a text's statistics depend on the texts scored with it"
            alone_scores[dtype, name] = scores(own)
            mimir = mimir_loss(model, tok, batch, args.max_length)
            print(f"{dtype} {name} ({len(batch)} texts): each text alone {len(batch) / t_own:.0f} texts/s, "
                  f"padded batches of {args.batch_size} {len(batch) / t_pad:.0f} texts/s "
                  f"(alone takes {t_own / t_pad:.2f}x the time)")
            print(f"  largest |score change| in padded batches: {largest(scores(padded), alone_scores[dtype, name])}")
            print(f"  Loss against MIMIR's computation: {np.abs(mimir - alone_scores[dtype, name]['loss']).max():.2e}")
    if len(dtypes) == 2:
        for name in texts(args.texts):
            print(f"bf16 against fp32, {name}: {largest(alone_scores['bfloat16', name], alone_scores['float32', name])}")


if __name__ == "__main__":
    main()
