"""Passive membership-inference baselines (the MIMIR / Min-K%++ family), chosen by name.

Convention for every score here and in the results table: **higher = more likely a member**.
So Loss is reported as the mean token log-likelihood (minus the loss), and so on.

- ``loss`` (Yeom et al. 2018): mean log p(x_t | x_<t).
- ``r_loss`` (Carlini et al. 2021, reference calibration): loss_ref − loss_target, i.e. the
  target's mean log-likelihood minus the reference model's; needs a reference model's scores.
- ``zlib`` (Carlini et al. 2021): −loss / zlib_bytes, with zlib_bytes the length of the
  zlib-compressed UTF-8 text.
- ``min_k`` (Shi et al. 2023): mean of the lowest ``k`` fraction of token log-probabilities.
- ``min_k_plus_plus`` (Zhang et al. 2024): per token z_t = (log p(x_t) − μ_t) / σ_t with μ_t, σ_t
  the mean and std of log p over the vocabulary under p; mean of the lowest ``k`` fraction of
  z_t. Where σ_t = 0 (a one-hot next-token distribution), z_t = 0.

The lowest-``k`` slice always holds at least one token, so a short text never yields NaN.

The scoring attacks (:mod:`mialab.scoring.attacks`: GradNorm, ReCaLL, DC-PDD, ...) are methods of the same
``scoring.methods`` list and the same score tables.
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Callable

import numpy as np

from mialab.core.finite import require_finite
from mialab.lm.logprobs import TokenStats
from mialab.pipeline.columns import Columns
from mialab.pipeline.config import ConfigError
from mialab.pipeline.plan import Plan
from mialab.scoring.attacks import ATTACKS

SIGMA_EPS = 1e-12


def lowest_k_mean(values: np.ndarray, k: float) -> float:
    """Mean of the ``max(1, floor(k * n))`` smallest values."""
    if not 0.0 < k <= 1.0:
        raise ValueError(f"k must be in (0, 1], got {k}")
    if len(values) == 0:
        raise ValueError("no tokens to score")
    n = max(1, int(math.floor(k * len(values))))
    return float(np.mean(np.partition(values, n - 1)[:n]))


def loss(st: TokenStats, text: str) -> float:
    """Mean token log-likelihood (= −loss)."""
    return float(np.mean(st.logp))


def zlib_score(st: TokenStats, text: str) -> float:
    """−loss / zlib-compressed length in bytes."""
    return float(np.mean(st.logp)) / len(zlib.compress(text.encode("utf-8")))


def min_k(st: TokenStats, text: str, k: float = 0.2) -> float:
    """Mean of the lowest-k token log-probabilities."""
    return lowest_k_mean(st.logp, k)


def min_k_plus_plus(st: TokenStats, text: str, k: float = 0.2) -> float:
    """Mean of the lowest-k vocabulary-normalised token log-probabilities."""
    safe = np.where(st.sigma > SIGMA_EPS, st.sigma, 1.0)
    z = np.where(st.sigma > SIGMA_EPS, (st.logp - st.mu) / safe, 0.0)
    return lowest_k_mean(z, k)


# name -> (function, takes k)
METHODS: dict[str, tuple[Callable[..., float], bool]] = {
    "loss": (loss, False),
    "zlib": (zlib_score, False),
    "min_k": (min_k, True),
    "min_k_plus_plus": (min_k_plus_plus, True),
}
# Methods computed from other score tables rather than from one model's token statistics.
DERIVED = {"r_loss"}
KNOWN = sorted([*METHODS, *DERIVED, *ATTACKS.known()])


def check_methods(names: list[str], scoring: dict | None = None) -> None:
    """Fail on an unknown method name, listing the known ones, and on a ``scoring`` section an attack among
    them cannot run with (:meth:`mialab.scoring.attacks.Attack.check`)."""
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ConfigError(f"scoring.methods: unknown scoring method(s) {unknown}; known: {', '.join(KNOWN)}")
    for name in names if scoring is not None else []:
        fault = ATTACKS.get(name).check(scoring) if name in ATTACKS.known() else None
        if fault:
            raise ConfigError(fault)


def attacks_of(scoring: dict) -> list[str]:
    """The scoring attacks among ``scoring.methods``, in its order."""
    return [m for m in scoring["methods"] if m in ATTACKS.known()]


def attack_inputs_of(plan: Plan, dataset: str) -> dict[str, dict]:
    """The input files of each scoring attack the config runs, on ``dataset`` (by attack, then name)."""
    return {a: ATTACKS.get(a).inputs(plan, dataset) for a in attacks_of(plan.config["scoring"])}


def column_name(method: str, k: float | None = None) -> str:
    """Results-table name of a method, e.g. ``min_k@0.2``."""
    return method if k is None else f"{method}@{k:g}"


def takes_k(method: str) -> bool:
    return method in METHODS and METHODS[method][1]


def score_columns(scoring: dict, *, reference: bool) -> list[str]:
    """The columns of a score table under config section ``scoring`` (``methods``, ``k``): one per method,
    one per k of Min-K% / Min-K%++; ``r_loss`` only for a model with a reference (``reference``)."""
    return [column_name(m, k) for m in scoring["methods"] if reference or m not in DERIVED
            for k in (scoring["k"] if takes_k(m) else [None])]


def passive_columns(plan: Plan) -> list[Columns]:
    """The passive baselines' columns (:class:`mialab.pipeline.columns.Columns`), one method each: what the
    config's score tables hold, on every evaluated (model, dataset) pair (``r_loss`` on those of a model with a
    reference)."""
    pairs = plan.evaluated_pairs()
    referenced = [(m, d) for m, d in pairs if plan.reference_of(m)]
    written = score_columns(plan.config["scoring"], reference=bool(referenced))
    return [Columns(m, re.escape(m) + ("@.+" if takes_k(m) else ""),
                    tuple(c for c in written if c.split("@")[0] == m), "scoring.methods, scoring.k",
                    tuple(referenced if m in DERIVED else pairs))
            for m in KNOWN]


def score_texts(stats: list[TokenStats], texts: list[str], methods: list[str], ks: list[float]) -> dict[str, np.ndarray]:
    """Every requested method of one model's token statistics (``r_loss`` and the attacks excluded) on every
    text, as named columns."""
    check_methods(methods)
    cols: dict[str, np.ndarray] = {}
    for name in methods:
        if name not in METHODS:
            continue
        fn, takes_k = METHODS[name]
        for k in ks if takes_k else [None]:
            kw = {"k": k} if takes_k else {}
            cols[column_name(name, k)] = np.array([fn(st, t, **kw) for st, t in zip(stats, texts)], dtype=np.float64)
    for name, col in cols.items():
        require_finite(f"method {name}: scores", col, FloatingPointError)
    return cols


def r_loss(target_loss: np.ndarray, reference_loss: np.ndarray) -> np.ndarray:
    """Reference-calibrated loss: target log-likelihood minus the reference's (higher = member)."""
    return np.asarray(target_loss, dtype=np.float64) - np.asarray(reference_loss, dtype=np.float64)
