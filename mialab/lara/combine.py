"""LaRA + Self-Critique: a mixture of the two scores' percentile ranks (paper, Sec. 5).

``S = beta * pr(SC) + (1 - beta) * pr(LaRA)`` where ``pr`` is the percentile rank within the
scored set (ties averaged). Both inputs are oriented higher = member, so is ``S``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from mialab.core.finite import require_finite

DEFAULT_BETA = 0.65


def percentile_rank(x: np.ndarray) -> np.ndarray:
    """Rank / n in (0, 1], ties get their average rank; non-finite input is an error."""
    x = require_finite("percentile_rank: scores", x)
    return rankdata(x, method="average") / len(x)


def combine_lara_sc(lara: np.ndarray, sc: np.ndarray, beta: float = DEFAULT_BETA) -> np.ndarray:
    """``beta * pr(sc) + (1 - beta) * pr(lara)`` for aligned arrays of the same samples."""
    if not 0 <= beta <= 1:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if len(lara) != len(sc):
        raise ValueError(f"{len(lara)} LaRA scores but {len(sc)} Self-Critique scores")
    return beta * percentile_rank(sc) + (1 - beta) * percentile_rank(lara)


def beta_sweep(ids: list[str], lara: np.ndarray, sc: np.ndarray,
               betas: np.ndarray | list[float] = tuple(np.round(np.linspace(0, 1, 11), 2))) -> pd.DataFrame:
    """Combined scores for every ``beta``: long table ``id``, ``beta``, ``score`` (label-free;
    evaluate each beta's scores downstream)."""
    return pd.concat([pd.DataFrame({"id": list(ids), "beta": float(b), "score": combine_lara_sc(lara, sc, float(b))})
                      for b in betas], ignore_index=True)
