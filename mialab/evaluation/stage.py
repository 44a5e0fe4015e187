"""The evaluation stage: score tables in, per-seed metrics and seed-aggregated summaries out."""

from __future__ import annotations

import pandas as pd

from mialab.evaluation.metrics import aggregate_over_seeds, evaluate_scores, fpr_column

META_COLUMNS = {"id", "label", "n_tokens", "seed", "model", "dataset"}


def method_columns(scores: pd.DataFrame) -> list[str]:
    """Score columns of a score table (everything that is not metadata)."""
    return [c for c in scores.columns if c not in META_COLUMNS]


def merge_tables(tables: list[tuple[str, str, int, pd.DataFrame]]) -> list[tuple[str, str, int, pd.DataFrame]]:
    """Join the score tables of the same (model, dataset, seed) on ``id``.

    Different stages (baselines, N-Sampling, ADRA, ...) score the same split; their method columns
    must not collide, and their ids and labels must agree.
    """
    merged: dict[tuple[str, str, int], pd.DataFrame] = {}
    for model, dataset, seed, df in tables:
        key = (model, dataset, seed)
        if key not in merged:
            merged[key] = df.copy()
            continue
        base = merged[key]
        clash = (set(method_columns(base)) & set(method_columns(df)))
        if clash:
            raise ValueError(f"{key}: method column(s) {sorted(clash)} come from two score tables")
        if set(base["id"]) != set(df["id"]):
            raise ValueError(f"{key}: score tables cover different ids")
        joined = base.merge(df.drop(columns=[c for c in ("n_tokens",) if c in df.columns]), on="id",
                            suffixes=("", "_other"))
        if (joined["label"] != joined["label_other"]).any():
            raise ValueError(f"{key}: score tables disagree on labels")
        merged[key] = joined.drop(columns="label_other")
    return [(*k, v) for k, v in merged.items()]


def evaluate_tables(tables: list[tuple[str, str, int, pd.DataFrame]], fpr_targets: list[float]) -> pd.DataFrame:
    """Per-seed metrics for ``(model, dataset, seed, scores)`` tables, one row per method."""
    rows = []
    for model, dataset, seed, scores in merge_tables(tables):
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
