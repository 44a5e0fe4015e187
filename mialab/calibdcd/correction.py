"""Bounded Feature Correction (CalibDCD Sec. 4.2).

Bounded feature adjustment: ``z' = z - lambda * (z B_r) B_r^T``, i.e. ``z' = z A`` with
``A_{r,lambda} = I - lambda B_r B_r^T``, applied to the detector's correctable block (the output
block for VeilProbe, the whole vector for DPDLLM); ``lambda = 1`` removes the shift-aligned
component (``A`` is then the orthogonal projector onto the complement of ``span B_r``).

Controlled correction selection: ``J(r, lambda) = mean_{D-cal} [q(z) - q(z A_{r,lambda})]``, the mean
drop of known non-members' member scores under the original classifier ``q``. Our selection rule
(the paper asks for no "unnecessarily aggressive transformation" without fixing the rule): among
the candidates whose ``J`` is within ``tolerance`` of the best ``J``, take the smallest ``r``, then
the smallest ``lambda``. The identity (``J = 0``) is always a candidate too: when no candidate lowers
the non-member scores (best ``J <= 0``) the correction is the identity, reported as ``r = 0,
lambda = 0``. A candidate whose ``B_r`` is empty is the identity as well (``J = 0``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from mialab.calibdcd.checks import require_finite, require_matrix

RANKS = (3, 4, 5, 6)
LAMBDAS = (0.7, 0.8, 0.9, 1.0)


def correction_matrix(basis: np.ndarray, lam: float) -> np.ndarray:
    """``A = I - lambda B B^T`` for an orthonormal basis ``B`` (``d x k``; ``k = 0`` gives ``I``)."""
    return np.eye(basis.shape[0]) - lam * basis @ basis.T


def apply_correction(z: np.ndarray, basis: np.ndarray, lam: float, block: slice | None = None) -> np.ndarray:
    """``z`` with its ``block`` columns ``z_b`` replaced by ``z_b - lambda (z_b B) B^T`` (all columns by default)."""
    out = require_matrix("features", z).copy()
    block = slice(None) if block is None else block
    zb = out[:, block]
    if zb.shape[1] != basis.shape[0]:
        raise ValueError(f"basis has {basis.shape[0]} rows but the corrected block has {zb.shape[1]} columns")
    out[:, block] = zb - lam * (zb @ basis) @ basis.T
    return out


def correction_objective(score: Callable[[np.ndarray], np.ndarray], z_cal: np.ndarray, basis: np.ndarray,
                         lam: float, block: slice | None = None) -> float:
    """``J``: mean drop of the calibration non-members' scores when their features are corrected."""
    before = require_finite("scores", score(z_cal))
    after = require_finite("corrected scores", score(apply_correction(z_cal, basis, lam, block)))
    return float(np.mean(before - after))


def select_correction(table: pd.DataFrame, tolerance: float, *,
                      allow_identity: bool = True) -> tuple[int, float]:
    """``(r, lambda)`` from a table with columns ``rank``, ``lam``, ``J`` (rule in the module docstring).

    ``allow_identity=False`` drops the identity fallback (a fixed-configuration ablation applies
    its candidate whatever its ``J``).
    """
    missing = {"rank", "lam", "J"} - set(table.columns)
    if missing:
        raise ValueError(f"objective table lacks column(s) {sorted(missing)}")
    require_finite("J", table["J"].to_numpy())
    best = table["J"].max()
    if allow_identity and best <= 0:
        return 0, 0.0
    near = table[table["J"] >= best - tolerance].sort_values(["rank", "lam"], kind="stable")
    return int(near["rank"].iloc[0]), float(near["lam"].iloc[0])
