"""Membership-inference metrics with written-down conventions.

- Scores are oriented so that **higher = more likely a member**; label 1 = member.
- AUROC: ``sklearn.metrics.roc_auc_score`` (ties count one half).
- TPR at FPR ≤ target: the largest TPR among the points of ``sklearn.metrics.roc_curve`` whose
  FPR is at most the target (the curve includes the point (0, 0), so the value always exists);
  every threshold's point, ``drop_intermediate=False``: with tied scores the default drops collinear
  points, among them sometimes the best one within the target.
- Aggregation over seeds: mean and sample standard deviation (ddof = 1; 0 for a single seed).
- A NaN or infinite score is an error naming the offending column, never silently dropped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score, roc_curve

from mialab.core.finite import require_finite


class ScoreError(ValueError):
    """Scores that cannot be evaluated (non-finite values, a single class)."""


def _check(labels, scores, what: str) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels).astype(int)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape:
        raise ScoreError(f"{what}: {len(y)} labels but {len(s)} scores")
    require_finite(what, s, error=ScoreError)
    if len(np.unique(y)) != 2:
        raise ScoreError(f"{what}: needs both members and non-members, got labels {sorted(set(y.tolist()))}")
    return y, s


def auroc(labels, scores, what: str = "scores") -> float:
    """Area under the ROC curve (higher score = member)."""
    y, s = _check(labels, scores, what)
    return float(roc_auc_score(y, s))


def tpr_at_fpr(labels, scores, target: float, what: str = "scores") -> float:
    """Largest TPR with FPR ≤ ``target`` on the empirical ROC curve."""
    y, s = _check(labels, scores, what)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return float(tpr[fpr <= target + 1e-12].max())


def fpr_column(target: float) -> str:
    """Table column name for TPR at a FPR target, e.g. ``tpr@1%fpr``."""
    return f"tpr@{target * 100:g}%fpr"


def evaluate_scores(df: pd.DataFrame, method_columns: list[str], fpr_targets: list[float],
                    what: str = "") -> pd.DataFrame:
    """One row per method: AUROC and TPR at each FPR target, from a table with ``label``."""
    rows = []
    for col in method_columns:
        name = f"{what} {col}".strip()
        row = {"method": col, "auroc": auroc(df["label"], df[col], name), "n": len(df),
               "n_members": int((df["label"] == 1).sum())}
        for t in fpr_targets:
            row[fpr_column(t)] = tpr_at_fpr(df["label"], df[col], t, name)
        rows.append(row)
    return pd.DataFrame(rows)


def aggregate_over_seeds(per_seed: pd.DataFrame, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """Mean and sample std (ddof=1, 0 for one seed) of each metric over seeds, per ``keys`` group."""
    g = per_seed.groupby(keys, sort=False)
    out = g[metrics].mean().add_suffix("_mean")
    std = g[metrics].std(ddof=1).fillna(0.0).add_suffix("_std")
    out = out.join(std)
    out["n_seeds"] = g.size()
    return out.reset_index()
