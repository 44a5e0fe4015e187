"""Feature tables: one row per (text id, view), feature columns ``z0000 ...`` in order.

The parquet form of the detectors' features between workflow stages.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from mialab.calibdcd.checks import require_matrix


def feature_columns(dim: int) -> list[str]:
    """Names of the ``dim`` feature columns."""
    return [f"z{i:04d}" for i in range(dim)]


def feature_frame(ids: Sequence[str], view: str, z: np.ndarray) -> pd.DataFrame:
    """A feature table for one view: columns ``id``, ``view``, then the features."""
    z = require_matrix(f"features of view {view!r}", z)
    if len(ids) != z.shape[0]:
        raise ValueError(f"{len(ids)} ids for {z.shape[0]} feature rows")
    frame = pd.DataFrame(z, columns=feature_columns(z.shape[1]))
    frame.insert(0, "view", view)
    frame.insert(0, "id", [str(i) for i in ids])
    return frame


def view_matrices(frame: pd.DataFrame, ids: Sequence[str]) -> dict[str, np.ndarray]:
    """Per view, the feature matrix with rows in the order of ``ids``; every view must cover every id."""
    cols = [c for c in frame.columns if c not in ("id", "view")]
    if cols != feature_columns(len(cols)):
        raise ValueError("feature columns must be z0000 ... in order")
    if frame.duplicated(["id", "view"]).any():
        raise ValueError("duplicate (id, view) rows in the feature table")
    ids = [str(i) for i in ids]
    out = {}
    for view, part in frame.groupby("view", sort=False):
        indexed = part.set_index("id")
        missing = [i for i in ids if i not in indexed.index]
        if missing:
            raise ValueError(f"view {view!r} lacks {len(missing)} id(s), e.g. {missing[:3]}")
        out[str(view)] = require_matrix(f"features of view {view!r}", indexed.loc[ids, cols].to_numpy())
    return out
