"""Bootstrap over candidates: confidence intervals and paired tests of AUROC and TPR@FPR.

A metric of a (dataset, model, method) is the mean over seeds of its per-seed value (as in the
results table). Seeds draw their splits from one pool, so they can share candidates (the tiny
world's AIME seeds do); a draw therefore resamples the *distinct* candidates with replacement,
separately for members and non-members (an id in several seeds' splits is one candidate), and each
seed's metric weights its candidates by how often the draw took them. Every method of a (dataset,
model) is scored on the same candidates, so one set of draws serves them all, and the difference of
two methods over the same draws is a paired comparison:

- CI: the percentile interval of the draws at ``level`` (default 95%);
- paired test: two-sided bootstrap p-value of "no difference", ``2 min(P(Δ ≤ 0), P(Δ ≥ 0))``
  with the +1 correction (so it is never 0), from the draws of Δ = method − baseline.

TPR at FPR ≤ t allows ``floor(t · n_neg)`` false positives: with 48 non-members, TPR@1%FPR allows
none and is the share of members scored above every non-member. Its intervals are wide and skewed
upwards (a draw often lacks the highest-scored non-member).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Draws:
    """Per seed: its labels and the weight (draw count) of each of its candidates in each draw, (B, n)."""

    labels: list[np.ndarray]
    weights: list[np.ndarray]


def draw(ids_by_seed: list, labels_by_seed: list, resamples: int, seed: int = 0) -> Draws:
    """Resample the distinct candidates of all seeds, members and non-members separately."""
    rng = np.random.default_rng(seed)
    ids_by_seed = [np.asarray(i).astype(str) for i in ids_by_seed]
    labels_by_seed = [np.asarray(y).astype(int) for y in labels_by_seed]
    label_of = {}
    for ids, y in zip(ids_by_seed, labels_by_seed):
        label_of.update(zip(ids, y))
    counts = {}
    for cls in (0, 1):
        pool = sorted(i for i, lab in label_of.items() if lab == cls)
        if not pool:
            raise ValueError("resampling needs both members and non-members")
        picks = rng.integers(0, len(pool), size=(resamples, len(pool)))
        c = np.zeros((resamples, len(pool)))
        np.add.at(c, (np.repeat(np.arange(resamples), len(pool)), picks.ravel()), 1)
        counts.update({i: c[:, k] for k, i in enumerate(pool)})
    weights = [np.stack([counts[i] for i in ids], axis=1) for ids in ids_by_seed]
    return Draws(labels_by_seed, weights)


def identity(labels_by_seed: list) -> Draws:
    """The observed sample as a single 'draw' (the point estimate)."""
    labels = [np.asarray(y).astype(int) for y in labels_by_seed]
    return Draws(labels, [np.ones((1, len(y))) for y in labels])


def _groups(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray):
    """Member and non-member weight per distinct score (ascending), (B, G) each."""
    values, group = np.unique(scores, return_inverse=True)
    onehot = np.zeros((len(scores), len(values)))
    onehot[np.arange(len(scores)), group] = 1
    return (weights * (labels == 1)) @ onehot, (weights * (labels == 0)) @ onehot


def weighted_auroc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC per row of ``weights`` (B, n): P(member > non-member) + ½ P(tie), pairs weighted by
    their draw counts; with unit weights ``sklearn.metrics.roc_auc_score``. NaN where a class is absent."""
    pos, neg = _groups(scores, labels, weights)
    below = np.cumsum(neg, axis=1) - neg
    num = (pos * (below + 0.5 * neg)).sum(axis=1)
    den = pos.sum(axis=1) * neg.sum(axis=1)
    return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def allowed_false_positives(target: float, n_neg: int) -> int:
    """How many non-members may score above the threshold at FPR ≤ ``target``."""
    return int(np.floor((target + 1e-12) * n_neg))


def weighted_tpr(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray, target: float) -> np.ndarray:
    """TPR at FPR ≤ ``target`` per row, as :func:`mialab.evaluation.metrics.tpr_at_fpr`: thresholds
    at the distinct scores from the top, the highest TPR whose (weighted) FPR stays within the target."""
    pos, neg = _groups(scores, labels, weights)
    fp = np.cumsum(neg[:, ::-1], axis=1)
    tp = np.cumsum(pos[:, ::-1], axis=1)
    n_pos, n_neg = pos.sum(axis=1, keepdims=True), neg.sum(axis=1, keepdims=True)
    ok = fp <= (target + 1e-12) * n_neg
    tpr = np.where(ok, tp, 0).max(axis=1) / np.where(n_pos[:, 0] > 0, n_pos[:, 0], 1)
    return np.where((n_pos[:, 0] > 0) & (n_neg[:, 0] > 0), tpr, np.nan)


def metric_draws(scores_by_seed: list, draws: Draws, metric: str) -> np.ndarray:
    """Mean over seeds of ``metric`` (``auroc`` or a FPR target as a float) in every draw."""
    per_seed = []
    for s, y, w in zip(scores_by_seed, draws.labels, draws.weights):
        s = np.asarray(s, dtype=np.float64)
        per_seed.append(weighted_auroc(s, y, w) if metric == "auroc" else weighted_tpr(s, y, w, float(metric)))
    return np.nanmean(per_seed, axis=0)


def top_k_mean(values: np.ndarray, k: int) -> np.ndarray:
    """Mean of the ``k`` largest of each column of ``values`` (metrics x draws)."""
    return np.sort(values, axis=0)[::-1][:k].mean(axis=0)


def top_k_draws(columns_by_seed: list[list], draws: Draws, k: int = 5) -> np.ndarray:
    """Mean over seeds of the mean of the ``k`` largest AUROCs among several score columns (per seed, a list of
    columns; the ADRA paper's summary of an attack) in every draw."""
    per_seed = [top_k_mean(np.stack([weighted_auroc(np.asarray(s, dtype=np.float64), y, w) for s in columns]), k)
                for columns, y, w in zip(columns_by_seed, draws.labels, draws.weights)]
    return np.nanmean(per_seed, axis=0)


def member_mean_draws(values_by_seed: list, draws: Draws) -> np.ndarray:
    """Mean over seeds of the members' mean of a per-candidate value (a reconstruction metric) in every draw (NaN for
    a seed none of whose members a draw took)."""
    per_seed = []
    for v, y, w in zip(values_by_seed, draws.labels, draws.weights):
        members = w * (y == 1)
        total, count = members @ np.asarray(v, dtype=np.float64), members.sum(axis=1)
        per_seed.append(np.divide(total, count, out=np.full(len(count), np.nan), where=count > 0))
    return np.nanmean(per_seed, axis=0)


def interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap draws."""
    a = (1 - level) / 2
    lo, hi = np.nanquantile(values, [a, 1 - a])
    return float(lo), float(hi)


def paired_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided bootstrap p-value of 'a and b do not differ', from paired draws of both."""
    d = np.asarray(a) - np.asarray(b)
    d = d[~np.isnan(d)]
    if np.all(d == 0):
        return 1.0
    n = len(d)
    tail = min((1 + np.sum(d <= 0)) / (n + 1), (1 + np.sum(d >= 0)) / (n + 1))
    return float(min(1.0, 2 * tail))
