"""Input checks shared by the CalibDCD modules: NaN/inf is an error, never silently dropped."""

from __future__ import annotations

import numpy as np

from mialab.core.finite import require_finite


def require_matrix(name: str, values: np.ndarray, n_cols: int | None = None) -> np.ndarray:
    """A finite 2-D float64 array with ``n_cols`` columns when given."""
    arr = require_finite(name, values)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D (rows x features) array, got shape {arr.shape}")
    if n_cols is not None and arr.shape[1] != n_cols:
        raise ValueError(f"{name}: expected {n_cols} feature columns, got {arr.shape[1]}")
    return arr
