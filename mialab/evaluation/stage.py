"""The evaluation stage: score tables in, per-seed metrics and seed-aggregated summaries out."""

from __future__ import annotations

import pandas as pd

from mialab.evaluation.metrics import aggregate_over_seeds, evaluate_scores, fpr_column

META_COLUMNS = {"id", "label", "n_tokens", "seed", "model", "dataset"}


def method_columns(scores: pd.DataFrame) -> list[str]:
    """Score columns of a score table (everything that is not metadata)."""
    return [c for c in scores.columns if c not in META_COLUMNS]


def evaluate_tables(tables: list[tuple[str, str, int, pd.DataFrame]], fpr_targets: list[float]) -> pd.DataFrame:
    """Per-seed metrics for ``(model, dataset, seed, scores)`` tables, one row per method."""
    rows = []
    for model, dataset, seed, scores in tables:
        res = evaluate_scores(scores, method_columns(scores), fpr_targets,
                              what=f"model {model} dataset {dataset} seed {seed}")
        res.insert(0, "seed", seed)
        res.insert(0, "model", model)
        res.insert(0, "dataset", dataset)
        rows.append(res)
    return pd.concat(rows, ignore_index=True)


def summarise(per_seed: pd.DataFrame, fpr_targets: list[float]) -> pd.DataFrame:
    """Mean ± std over seeds per (dataset, model, method)."""
    metrics = ["auroc", *(fpr_column(t) for t in fpr_targets)]
    return aggregate_over_seeds(per_seed, ["dataset", "model", "method"], metrics)
