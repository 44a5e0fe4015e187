"""Reconstruction evaluation protocols of ADRA (Appendix D.1) and N-rollout aggregation.

During generation the model may be given the first ``p`` of the ground-truth suffix words as the
start of its answer (the "assistant prefix"). Two protocols score a completion:

- ``suffix`` (the paper's reported one): drop those given words from the ground truth and
  compare the completion with what the model was *not* shown;
- ``full``: compare given words + completion with the complete ground truth.

Every candidate has N rollouts; their per-rollout scores are aggregated by average-of-N
(``aon``, mean) or best-of-N (``bon``, max).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mialab.core.finite import require_finite
from mialab.similarity.metrics import embedding_cosine
from mialab.text.prefix import split_assistant_prefix

PROTOCOLS = ("suffix", "full")
AGGREGATIONS = {"aon": "mean", "bon": "max"}




def evaluation_pair(completion: str, ground_truth: str, ratio: float, protocol: str = "suffix",
                    min_words: int = 1) -> tuple[str, str]:
    """The (candidate, reference) texts that ``protocol`` compares for one completion (``ratio``,
    ``min_words``: the task's assistant-prefix rule)."""
    given, rest = split_assistant_prefix(ground_truth, ratio, min_words)
    if protocol == "suffix":
        return completion, rest
    if protocol == "full":
        return (f"{given} {completion}" if given else completion), " ".join(ground_truth.split())
    raise ValueError(f"unknown evaluation protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")


def score_rollouts(rollouts: pd.DataFrame, split: pd.DataFrame, *, ratio: float = 0.0, min_words: int = 1,
                   protocol: str = "suffix", n_min: int = 3, n_max: int | None = None, convention: str = "paper",
                   embedding_model: str | None = None, embedding_dtype: str = "float32",
                   workers: int = 1) -> pd.DataFrame:
    """Every metric of every rollout (columns id, sample, metrics...) against its ground-truth suffix.

    ``rollouts`` has columns id, sample, text; ``split`` has id, suffix. ``convention``: the lexical
    metrics' (:func:`mialab.similarity.metrics.metrics_from_counts`); under ``code`` the embedding
    similarity is reported as the released code reports it, ``(1 + cos) / 2``. ``embedding_model``
    (a sentence-transformers name or path, computing in ``embedding_dtype``) adds
    ``embedding_cosine``; None skips it.
    """
    truth = split.set_index("id")["suffix"]
    missing = set(rollouts["id"]) - set(truth.index)
    if missing:
        raise KeyError(f"{len(missing)} rollout ids are not in the split, e.g. {sorted(map(str, missing))[:3]}")
    pairs = [evaluation_pair(text, truth[i], ratio, protocol, min_words)
             for i, text in zip(rollouts["id"], rollouts["text"])]
    candidates = [c for c, _ in pairs]
    references = [r for _, r in pairs]
    # here, not at the top: the plan imports this module, and every Snakemake process (each SLURM job's too)
    # would load the kernel's numba and pydivsufsort only to parse the workflow
    from mialab.similarity.kernel import lexical_metrics

    scores = lexical_metrics(candidates, references, n_min=n_min, n_max=n_max, convention=convention,
                             workers=workers)
    if embedding_model is not None:
        cos = embedding_cosine(candidates, references, model=embedding_model, dtype=embedding_dtype)
        scores["embedding_cosine"] = (1.0 + cos) / 2.0 if convention == "code" else cos
    return pd.concat([rollouts[["id", "sample"]].reset_index(drop=True), scores], axis=1)


def aggregate_rollouts(scores: pd.DataFrame, how: str, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per id: the mean (``aon``) or max (``bon``) of each metric over the id's rollouts."""
    try:
        reducer = AGGREGATIONS[how]
    except KeyError:
        raise ValueError(f"unknown aggregation {how!r}; known: {', '.join(AGGREGATIONS)}") from None
    cols = list(metrics) if metrics is not None else [c for c in scores.columns if c not in ("id", "sample")]
    require_finite("rollout scores", scores[cols].to_numpy(dtype=np.float64))
    return scores.groupby("id", sort=True)[cols].agg(reducer).reset_index()
