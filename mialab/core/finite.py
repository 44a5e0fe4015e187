"""The one finiteness check: NaN or inf in scores, features or embeddings is an error, never dropped."""

from __future__ import annotations

import numpy as np


def require_finite(name: str, values, error: type[Exception] = ValueError) -> np.ndarray:
    """Return ``values`` as a float64 array; raise ``error`` naming ``name`` (how many entries, the
    first rows) if any entry is NaN or inf."""
    arr = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])[:5].tolist()
        raise error(f"{name}: {int(bad.sum())} non-finite value(s) (NaN or inf), e.g. in row(s) {rows}")
    return arr
