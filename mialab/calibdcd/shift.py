"""Multi-View Shift Detection (CalibDCD Sec. 4.1), on known non-members D-cal only.

For every controlled view ``e`` and calibration text ``s``:

- Multi-View Shift Measurement: ``dz = z(e(s)) - z(e0(s))`` and ``dq = q(z(e(s))) - q(z(e0(s)))``;
- FPP-based view ranking: ``u = max(0, dq)``, ``FPP(e) = mean_s u``; the top-3 views are kept;
- Cross-view shift consensus: for each kept view the rank-``r`` basis ``U_e`` (top right singular
  vectors) of the rows ``w_s * dz_s`` with ``w_s = sqrt(min(u_s, c_e))`` and ``c_e`` the 95th
  percentile of the positive ``u``; ``G_r = mean_e U_e U_e^T``; the eigenvectors of ``G_r`` with
  eigenvalue >= tau (0.95) form the orthonormal shift basis ``B_r``.

When no direction reaches tau, ``B_r`` is empty (``d x 0``) and the correction it defines is the
identity. A view whose scores never rise (all ``u = 0``) contributes an empty ``U_e``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from mialab.calibdcd.checks import require_finite

WEIGHTINGS = ("clipped_score", "binary")


def score_increase(q_original: np.ndarray, q_view: np.ndarray) -> np.ndarray:
    """``u = max(0, q(z_e) - q(z_e0))`` per text: how far a view pushes a non-member towards 'member'."""
    q0, qe = require_finite("original scores", q_original), require_finite("view scores", q_view)
    if q0.shape != qe.shape:
        raise ValueError(f"score shapes differ: {q0.shape} vs {qe.shape}")
    return np.maximum(0.0, qe - q0)


def false_positive_pressure(increases: dict[str, np.ndarray]) -> pd.Series:
    """``FPP(e) = mean u`` per view, in the given view order."""
    return pd.Series({view: float(np.mean(u)) for view, u in increases.items()}, name="fpp", dtype=float)


def top_views(fpp: pd.Series, k: int) -> list[str]:
    """The ``k`` views with the largest FPP (ties kept in the given view order)."""
    order = sorted(range(len(fpp)), key=lambda i: -fpp.iloc[i])
    return [fpp.index[i] for i in order[:k]]


def random_views(views: Sequence[str], k: int, seed: int) -> list[str]:
    """``k`` views drawn uniformly without replacement (seeded): the Random-3 ablation."""
    rng = np.random.default_rng(seed)
    return [views[i] for i in sorted(rng.choice(len(views), size=min(k, len(views)), replace=False))]


def shift_weights(u: np.ndarray, weighting: str = "clipped_score") -> np.ndarray:
    """Row weights of the shift matrix.

    ``clipped_score``: ``sqrt(min(u, c_e))`` with ``c_e`` the 95th percentile of the positive ``u``
    (so a few extreme score jumps cannot dominate the subspace); ``binary``: 1 where ``u > 0``
    (the Binary Positive Weight ablation).
    """
    u = require_finite("score increases", u)
    positive = u > 0
    if weighting == "binary":
        return positive.astype(np.float64)
    if weighting != "clipped_score":
        raise KeyError(f"unknown weighting {weighting!r}; known: {list(WEIGHTINGS)}")
    if not positive.any():
        return np.zeros_like(u)
    cap = np.percentile(u[positive], 95)
    return np.sqrt(np.minimum(u, cap))


def view_basis(shifts: np.ndarray, weights: np.ndarray, rank: int) -> np.ndarray:
    """``U_e``: the top-``rank`` right singular vectors (columns, ``d x r_e``) of ``weights[:, None] * shifts``.

    Only directions with a non-zero singular value are kept, so ``r_e <= rank``.
    """
    m = require_finite("feature shifts", shifts) * require_finite("shift weights", weights)[:, None]
    _, sing, vt = np.linalg.svd(m, full_matrices=False)
    tol = sing.max(initial=0.0) * max(m.shape) * np.finfo(np.float64).eps  # numpy's matrix_rank tolerance
    keep = int(np.sum(sing > tol))
    return vt[: min(rank, keep)].T


def consensus_operator(bases: Sequence[np.ndarray]) -> np.ndarray:
    """``G = mean_e U_e U_e^T`` over the kept views' bases."""
    if not bases:
        raise ValueError("consensus needs at least one view basis")
    return np.mean([u @ u.T for u in bases], axis=0)


def consensus_basis(bases: Sequence[np.ndarray], tau: float = 0.95, max_rank: int | None = None) -> np.ndarray:
    """``B``: orthonormal eigenvectors of ``G`` with eigenvalue >= ``tau``, largest first.

    ``max_rank`` caps the number kept; with ``tau = 0`` and ``max_rank = r`` this is the top-``r``
    eigenvectors of ``G`` without the agreement filter (the No Cross-View Consensus ablation).
    Eigenvalues at numerical zero are never kept.
    """
    values, vectors = np.linalg.eigh(consensus_operator(bases))
    order = np.argsort(values)[::-1]
    keep = [i for i in order if values[i] >= tau and values[i] > 1e-10]
    return vectors[:, keep[:max_rank]]
