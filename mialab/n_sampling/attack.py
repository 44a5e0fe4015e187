"""Reconstruction-based membership scores: N rollouts per candidate -> one score column per metric.

Used by N-Sampling (Hallinan et al. 2025, generalised in ADRA Section 4.2) and by ADRA's evaluation
(Appendix D.3), which differ only in the policy that sampled the rollouts. Every rollout is scored
with the full metric suite of :mod:`mialab.similarity` (Table 16) under the suffix-only
protocol by default (the words the prompt gave away are not compared), and the N scores of a
candidate are aggregated by average-of-N (``aon``) and best-of-N (``bon``). A better reconstruction
means a more likely member, so every column is a membership score (higher = member), named
``<method>/<metric>@<aon|bon>``.

The paper summarises an attack by the mean of its top-5 metric AUROCs (:func:`top_k_mean`); the
five are chosen on the evaluation labels, so it is an optimistic summary, reported next to a
metric fixed in advance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mialab.core.finite import require_finite
from mialab.evaluation import bootstrap as bs
from mialab.n_sampling.evaluation import AGGREGATIONS, aggregate_rollouts, score_rollouts
from mialab.similarity.metrics import LEXICAL_METRICS

EMBEDDING_METRIC = "embedding_cosine"


def metric_names(embedding_model: str | None) -> list[str]:
    """The metrics an attack scores: every lexical metric, plus embedding cosine when a model is named."""
    return [*LEXICAL_METRICS, *([EMBEDDING_METRIC] if embedding_model else [])]


def rollout_metrics(rollouts: pd.DataFrame, split: pd.DataFrame, *, ratio: float, n: int, min_words: int = 1,
                    protocol: str = "suffix", n_min: int = 3, n_max: int | None = None, convention: str = "paper",
                    embedding_model: str | None = None, embedding_dtype: str = "float32",
                    workers: int = 1) -> pd.DataFrame:
    """Every metric of every rollout (columns id, sample, metrics); each candidate must have ``n`` rollouts."""
    counts = rollouts.groupby("id").size()
    missing = sorted(set(split["id"]) - set(counts.index))
    wrong = counts[counts != n]
    if missing or len(wrong) or len(counts) != len(split):
        raise ValueError(f"need {n} rollouts for each of the {len(split)} candidates: {len(missing)} have none, "
                         f"{len(wrong)} have another number, {len(set(counts.index) - set(split['id']))} are unknown")
    scored = score_rollouts(rollouts, split, ratio=ratio, min_words=min_words, protocol=protocol, n_min=n_min,
                            n_max=n_max, convention=convention, embedding_model=embedding_model,
                            embedding_dtype=embedding_dtype, workers=workers)
    return scored[["id", "sample", *metric_names(embedding_model)]]


def score_table(metrics: pd.DataFrame, split: pd.DataFrame, method: str) -> pd.DataFrame:
    """Score table of an attack (columns id, label, ``<method>/<metric>@<agg>``) from per-rollout metrics.

    Labels come from the split and are joined last: nothing before this step sees them.
    """
    names = [c for c in metrics.columns if c not in ("id", "sample")]
    table = split[["id", "label"]].reset_index(drop=True)
    for how in AGGREGATIONS:
        agg = aggregate_rollouts(metrics, how, names).set_index("id")
        agg.columns = [f"{method}/{m}@{how}" for m in agg.columns]
        table = table.join(agg, on="id")
    require_finite(f"{method}: score table (a candidate without rollouts?)",
                   table.drop(columns=["id", "label"]).to_numpy(dtype=np.float64))
    return table


def method_of(column: str) -> str:
    """The attack a score column belongs to (``adra_plus/jaccard@bon`` -> ``adra_plus``)."""
    return column.split("/", 1)[0]


def top_k_mean(aurocs: Sequence[float], k: int = 5) -> float:
    """Mean of the ``k`` largest AUROCs of an attack's metrics (the paper's summary, Table 10 / Figure 2)."""
    values = np.asarray(aurocs, dtype=np.float64)
    if values.size < k:
        raise ValueError(f"top-{k} mean needs at least {k} finite AUROCs, got {values.size}")
    require_finite(f"top-{k} mean: AUROCs", values)
    return float(bs.top_k_mean(values[:, None], k)[0])
