"""Membership rules that assign labels to a pool when the raw corpus does not fix them.

The tiny world decides membership itself (it trains the target), so its labels are ground truth:
a seeded random partition, stable under row order because it ranks a keyed hash of each id.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd


def random_partition(ids: pd.Series, fraction: float, seed: int) -> np.ndarray:
    """Label ``round(fraction * n)`` of ``ids`` as members (1), the rest non-members (0).

    The choice depends only on the set of ids and ``seed``, not on their order.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"membership fraction must be in (0, 1), got {fraction}")
    keys = np.array([hashlib.sha256(f"{seed}:{i}".encode()).hexdigest() for i in ids])
    order = np.argsort(keys, kind="stable")
    labels = np.zeros(len(ids), dtype=np.int8)
    labels[order[: int(round(fraction * len(ids)))]] = 1
    return labels


def apply_membership(pool: pd.DataFrame, rule: dict, *, source_label: pd.Series | None = None) -> pd.DataFrame:
    """Set ``pool['label']`` by ``rule``: ``{"rule": "label"}`` keeps the corpus's own label
    (``source_label``, checked 0 / 1 where the family read it: :func:`mialab.data.sources.require_labels`),
    ``{"rule": "random", "fraction": f, "seed": s}`` draws a random partition."""
    kind = rule["rule"]
    out = pool.copy()
    if kind == "label":
        if source_label is None:
            raise ValueError("membership rule 'label' needs a label column in the source")
        out["label"] = source_label.to_numpy().astype("int8")
    elif kind == "random":
        out["label"] = random_partition(out["id"], float(rule["fraction"]), int(rule["seed"]))
    else:
        raise ValueError(f"unknown membership rule {kind!r}; known: label, random (and family-specific rules)")
    return out
