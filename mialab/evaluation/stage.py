"""The evaluation stage: score tables in, per-seed metrics and seed-aggregated summaries out."""

from __future__ import annotations

import pandas as pd

from mialab.evaluation.metrics import aggregate_over_seeds, evaluate_scores, fpr_column

META_COLUMNS = {"id", "label", "n_tokens", "truncated", "seed", "model", "dataset"}
# ``DataFrame.attrs`` key of a merged table: the methods whose score table has a ``truncated`` column
# (texts cut to ``scoring.max_length``), so results show the count beside exactly those methods
TRUNCATED_METHODS = "truncated_methods"


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
        cut = list(df.attrs.get(TRUNCATED_METHODS, method_columns(df) if "truncated" in df.columns else []))
        if key not in merged:
            merged[key] = df.copy()
            merged[key].attrs[TRUNCATED_METHODS] = cut
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
        if "truncated_other" in joined.columns:  # two tables that cut texts: a text counts when either cut it
            joined["truncated"] = joined["truncated"] | joined.pop("truncated_other")
        merged[key] = joined.drop(columns="label_other")
        merged[key].attrs[TRUNCATED_METHODS] = [*base.attrs[TRUNCATED_METHODS], *cut]
    return [(*k, v) for k, v in merged.items()]


def evaluate_tables(tables: list[tuple[str, str, int, pd.DataFrame]], fpr_targets: list[float]) -> pd.DataFrame:
    """Per-seed metrics for ``(model, dataset, seed, scores)`` tables, one row per method."""
    rows = []
    for model, dataset, seed, scores in merge_tables(tables):
        res = evaluate_scores(scores, method_columns(scores), fpr_targets,
                              what=f"model {model} dataset {dataset} seed {seed}")
        cut = set(scores.attrs.get(TRUNCATED_METHODS, ()))
        n_cut = int(scores["truncated"].sum()) if cut else 0
        res["n_truncated"] = pd.array([n_cut if m in cut else None for m in res["method"]], dtype="Int64")
        res.insert(0, "seed", seed)
        res.insert(0, "model", model)
        res.insert(0, "dataset", dataset)
        rows.append(res)
    return pd.concat(rows, ignore_index=True)


def summarise(per_seed: pd.DataFrame, fpr_targets: list[float]) -> pd.DataFrame:
    """Mean ± std over seeds per (dataset, model, method); ``n_truncated`` and ``n``: candidates cut to
    ``scoring.max_length`` and candidates, summed over seeds (``n_truncated`` missing where unrecorded)."""
    metrics = ["auroc", *(fpr_column(t) for t in fpr_targets)]
    out = aggregate_over_seeds(per_seed, ["dataset", "model", "method"], metrics)
    if "n_truncated" in per_seed.columns:
        g = per_seed.groupby(["dataset", "model", "method"], sort=False)
        counts = g.agg(n_total=("n", "sum"), n_truncated=("n_truncated", lambda c: c.sum() if c.notna().all() else pd.NA))
        out = out.merge(counts.reset_index(), on=["dataset", "model", "method"])
        out["n_truncated"] = out["n_truncated"].astype("Int64")
    return out


def roc_panels(tables: list[tuple[str, str, int, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """One ROC panel per model (in first-seen order): its score tables of every seed, stacked."""
    return {m: pd.concat([t[3] for t in tables if t[0] == m], ignore_index=True)
            for m in dict.fromkeys(t[0] for t in tables)}
