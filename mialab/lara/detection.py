"""LaRA detection score: per-(metric, layer) robust deviation from a clean reference profile.

For metric ``m`` and layer ``l`` (paper, Sec. 4):

1. sign-preserving compression ``x -> sign(x) * log(1 + |x|)``;
2. robust z-score ``z = (x - mu) / (sigma + eps)`` with ``mu`` the median and ``sigma`` =
   1.4826 * MAD of the compressed values of a CLEAN REFERENCE set, i.e. questions known not to
   be in the training data, passed as their own array. Nothing here accepts labels, so the
   score of an evaluated question cannot depend on the evaluation labels. MAD = 0 (more than
   half the reference values equal) falls back to 1.2533 * mean absolute deviation around the
   median (the usual guard; both constants make the scale a standard deviation under a
   Gaussian); a reference column with no spread at all is an error;
3. alignment to the contamination direction: RSM signed as is, RSI negated (members are more
   rigid), DC absolute value (members deviate in either direction);
4. aggregate over metrics and layers: the mean of the absolute aligned z (``how="abs"``, the
   default; note that then the signs chosen in step 3 do not change the aggregate) or the mean
   of the aligned z (``how="signed"``).

Orientation: higher score = larger deviation from the clean profile = more likely member.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mialab.core.finite import require_finite
from mialab.lara.metrics import METRIC_NAMES

MAD_TO_SD = 1.4826
MEAN_AD_TO_SD = 1.2533
Z_EPS = 1e-8  # the released code's --rep_stiff_lara_eps
ALIGNMENT = {"rsm": "signed", "dc": "abs", "rsi": "negated"}
AGGREGATES = ("abs", "signed")


def signed_log(x: np.ndarray) -> np.ndarray:
    """``sign(x) * log(1 + |x|)``: tames heavy tails, near-identity around 0."""
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.log1p(np.abs(x))


@dataclass(frozen=True)
class RobustReference:
    """Clean-reference centre (median) and scale per (metric, layer), on the compressed scale."""

    center: np.ndarray
    scale: np.ndarray


def robust_scale(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """1.4826 * MAD along ``axis``; where MAD = 0, 1.2533 * mean absolute deviation from the median."""
    dev = np.abs(x - np.median(x, axis=axis, keepdims=True))
    mad = np.median(dev, axis=axis)
    return np.where(mad > 0, MAD_TO_SD * mad, MEAN_AD_TO_SD * dev.mean(axis=axis))


def fit_reference(reference: np.ndarray) -> RobustReference:
    """Fit the clean profile on ``reference [n_ref, ...]`` raw metric values (compressed here)."""
    x = signed_log(reference)
    if x.shape[0] < 2:
        raise ValueError(f"the clean reference needs at least 2 samples, got {x.shape[0]}")
    require_finite("the clean reference", x)
    scale = robust_scale(x)
    if (scale == 0).any():
        bad = np.argwhere(scale == 0)[0].tolist()
        raise ValueError(f"the clean reference has no spread at position {bad}: every value is equal")
    return RobustReference(center=np.median(x, axis=0), scale=scale)


def robust_z(values: np.ndarray, reference: RobustReference, eps: float = Z_EPS) -> np.ndarray:
    """``(signed_log(values) - center) / (scale + eps)``, broadcast over the sample axis."""
    return (signed_log(values) - reference.center) / (reference.scale + eps)


def align(z: np.ndarray, metrics: tuple[str, ...] = METRIC_NAMES) -> np.ndarray:
    """Orient ``z [n, n_metrics, n_layers]`` so that larger means more member-like (per :data:`ALIGNMENT`)."""
    out = np.array(z, dtype=np.float64)
    for i, name in enumerate(metrics):
        rule = ALIGNMENT[name]
        out[:, i] = -out[:, i] if rule == "negated" else np.abs(out[:, i]) if rule == "abs" else out[:, i]
    return out


def aggregate(aligned: np.ndarray, how: str = "abs") -> np.ndarray:
    """Mean over the metric and layer axes of ``aligned [n, n_metrics, n_layers]``."""
    if how not in AGGREGATES:
        raise ValueError(f"unknown aggregate {how!r}; known: {', '.join(AGGREGATES)}")
    return (np.abs(aligned) if how == "abs" else aligned).mean(axis=(1, 2))


def lara_scores(values: np.ndarray, reference_values: np.ndarray, *, eps: float = Z_EPS, how: str = "abs",
                metrics: tuple[str, ...] = METRIC_NAMES) -> np.ndarray:
    """LaRA score per evaluated sample from ``values [n, n_metrics, n_layers]`` and the clean
    ``reference_values [n_ref, n_metrics, n_layers]``."""
    return aggregate(align(robust_z(values, fit_reference(reference_values), eps), metrics), how)


WINDOWS = ("early", "mid", "late")  # the 9:9:10 runs of the layers, in order


def window_lengths(n_layers: int) -> tuple[int, int, int]:
    """Early / mid / late run lengths in the released code's 9:9:10 ratio (``segment_lengths_9_9_10``):
    ``9 L // 28`` early and mid layers, the rest late (28 layers: 9, 9, 10)."""
    early = 9 * n_layers // 28
    return early, early, n_layers - 2 * early


def layer_windows(n_layers: int) -> dict[str, np.ndarray]:
    """Early / mid / late runs of ``n_layers`` probed positions, split 9:9:10 (:func:`window_lengths`).

    Under 4 layers the early and mid runs are empty (the code's NaN columns) and left out."""
    early, mid, _ = window_lengths(n_layers)
    pos = np.arange(n_layers)
    windows = dict(zip(WINDOWS, (pos[:early], pos[early:early + mid], pos[early + mid:])))
    return {name: p for name, p in windows.items() if len(p)}


def metric_tensor(table: pd.DataFrame) -> tuple[list[str], list[int], np.ndarray]:
    """``(ids, layers, values [n_ids, 3, n_layers])`` from a metrics table (``id``, ``layer``,
    ``rsm``, ``dc``, ``rsi``; any other column, a label for one, is ignored)."""
    wide = table.pivot(index="id", columns="layer", values=list(METRIC_NAMES))
    ids = table["id"].drop_duplicates().tolist()
    wide = wide.loc[ids]
    layers = sorted(table["layer"].unique().tolist())
    values = np.stack([wide[name][layers].to_numpy(dtype=np.float64) for name in METRIC_NAMES], axis=1)
    require_finite("the metrics table, by id (NaN: a missing (id, layer))", values)
    return ids, layers, values


def detection_scores(metrics: pd.DataFrame, reference: pd.DataFrame, *, eps: float = Z_EPS,
                     how: str = "abs") -> pd.DataFrame:
    """Stage: LaRA scores of the evaluated questions and the ablations of the paper's Table 2.

    ``metrics`` and ``reference`` are metrics tables (see :func:`metric_tensor`) with the same
    layers; ``reference`` holds clean questions only. Columns: ``id``, ``lara`` (all metrics
    and layers), ``lara_<metric>`` (one metric), ``lara_no_<metric>`` (leave one out),
    ``lara_early`` / ``lara_mid`` / ``lara_late`` (all metrics, one 9:9:10 run of the layers).
    """
    ids, layers, values = metric_tensor(metrics)
    _, ref_layers, ref_values = metric_tensor(reference)
    if layers != ref_layers:
        raise ValueError(f"evaluated layers {layers} differ from the reference's {ref_layers}")
    aligned = align(robust_z(values, fit_reference(ref_values), eps))
    out = {"id": ids, "lara": aggregate(aligned, how)}
    for i, name in enumerate(METRIC_NAMES):
        out[f"lara_{name}"] = aggregate(aligned[:, [i]], how)
        out[f"lara_no_{name}"] = aggregate(np.delete(aligned, i, axis=1), how)
    for window, pos in layer_windows(len(layers)).items():
        out[f"lara_{window}"] = aggregate(aligned[:, :, pos], how)
    return pd.DataFrame(out)
