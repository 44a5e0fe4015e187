"""LaRA's three representation-geometry metrics, vectorised over questions and layers.

Notation (paper, Sec. 3.2): ``h_l(q)`` is the mean-pooled layer-``l`` state of text ``q``;
the perturbation shift is ``Delta_l(q) = h_l(q) - h_l(BlankImportant(q))``. A question's value
is standardised against its ``M`` neighbours: ``(x(Q) - mean_k x(N_k)) / (std_k x(N_k) + eps)``
with the sample standard deviation (``ddof=1``, as the released code's ``rsm_calculation.py`` and
``rsi_calculation.py``; the paper does not say which).

Array shapes: ``Q`` questions, ``M`` neighbours, ``K`` variants, ``L`` layers, ``D`` hidden size. A question
with fewer neighbours than ``M`` (those whose blank stayed invalid left, :mod:`mialab.lara.construction`) has NaN
in the places of the missing ones, and every statistic over the neighbours skips them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mialab.core.finite import require_finite

EPS = 1e-8
METRIC_NAMES = ("rsm", "dc", "rsi")


def standardise_against_neighbours(x_q: np.ndarray, x_nb: np.ndarray, eps: float = EPS) -> np.ndarray:
    """``(x_q - mean_M x_nb) / (std_M x_nb + eps)`` (sample std, ``ddof=1``; missing neighbours, NaN, skipped);
    ``x_q [Q, ...]``, ``x_nb [Q, M, ...]``."""
    return (x_q - np.nanmean(x_nb, axis=1)) / (np.nanstd(x_nb, axis=1, ddof=1) + eps)


def perturbation_shift(h: np.ndarray, h_blank: np.ndarray) -> np.ndarray:
    """``Delta = h(q) - h(BlankImportant(q))``, elementwise over any leading axes."""
    return h - h_blank


def rsm(shift_q: np.ndarray, shift_nb: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Representation Shift Magnitude ``[Q, L]``: ``||Delta(Q)||`` standardised against the
    neighbours' ``||Delta(N_k)||``. ``shift_q [Q, L, D]``, ``shift_nb [Q, M, L, D]``."""
    return standardise_against_neighbours(np.linalg.norm(shift_q, axis=-1), np.linalg.norm(shift_nb, axis=-1), eps)


def directional_collapse(shift_q: np.ndarray, shift_nb: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Directional Collapse ``[Q, L]``: cosine of ``Delta(Q)`` with the neighbours' mean shift
    ``mean_k Delta(N_k)`` (``eps`` in the denominator keeps a zero shift at 0, not NaN; missing neighbours skipped)."""
    mean_nb = np.nanmean(shift_nb, axis=1)
    dot = (shift_q * mean_nb).sum(axis=-1)
    return dot / (np.linalg.norm(shift_q, axis=-1) * np.linalg.norm(mean_nb, axis=-1) + eps)


def local_variability(variants: np.ndarray) -> np.ndarray:
    """Mean distance of the variants' states to their centroid: ``variants [..., K, L, D]`` -> ``[..., L]``."""
    centroid = variants.mean(axis=-3, keepdims=True)
    return np.linalg.norm(variants - centroid, axis=-1).mean(axis=-2)


def rsi(variants_q: np.ndarray, variants_nb: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Representation Stability Index ``[Q, L]``: the local variability of the blanked question's
    paraphrases, standardised against the neighbours'. ``variants_q [Q, K, L, D]``,
    ``variants_nb [Q, M, K, L, D]``."""
    return standardise_against_neighbours(local_variability(variants_q), local_variability(variants_nb), eps)


@dataclass(frozen=True)
class QuestionGroups:
    """Features arranged per question: ``ids [Q]``, ``rows [Q, M + 1, K + 2]`` (positions in the
    feature array; neighbour axis 0 = the question itself, form axis = original, blank, variants; -1 where a
    question has fewer neighbours)."""

    ids: list[str]
    rows: np.ndarray

    @property
    def n_neighbours(self) -> int:
        return self.rows.shape[1] - 1

    @property
    def n_variants(self) -> int:
        return self.rows.shape[2] - 2


def group_rows(index: pd.DataFrame) -> QuestionGroups:
    """Locate every (question, neighbour, form, variant) of the perturbation table in ``index``.

    Questions keep their order of first appearance; a duplicated role, or a missing role of a question or a
    neighbour it has, is an error (a question may have fewer neighbours than another: its last places are -1).
    """
    key_cols = ["id", "neighbour", "form", "variant"]
    if index.duplicated(key_cols).any():
        raise ValueError(f"duplicated roles, e.g. {index[index.duplicated(key_cols)].iloc[0][key_cols].tolist()}")
    ids = index["id"].astype(str).drop_duplicates().tolist()
    m = int(index["neighbour"].max()) + 1
    k = int(index["variant"].max()) + 1
    forms = [("original", -1), ("blank", -1)] + [("variant", j) for j in range(k)]
    wanted = pd.MultiIndex.from_tuples([(q, n, f, v) for q in ids for n in range(-1, m) for f, v in forms],
                                       names=key_cols)
    have = pd.MultiIndex.from_frame(index[key_cols].astype({"id": str, "neighbour": int, "variant": int}))
    pos = have.get_indexer(wanted).reshape(len(ids), m + 1, k + 2)
    counts = index.astype({"id": str}).groupby("id", sort=False)["neighbour"].max().reindex(ids).to_numpy() + 1
    present = np.arange(-1, m)[None, :] < counts[:, None]          # the question itself and its own neighbours
    missing = (pos < 0) & present[:, :, None]
    if missing.any():
        q, n, f = np.argwhere(missing)[0]
        raise ValueError(f"missing role(s), e.g. {wanted[(q * (m + 1) + n) * (k + 2) + f]}")
    return QuestionGroups(ids=ids, rows=np.where(present[:, :, None], pos, -1))


def question_metrics(feats: np.ndarray, eps: float = EPS) -> dict[str, np.ndarray]:
    """RSM, DC and RSI ``[Q, L]`` from ``feats [Q, M + 1, K + 2, L, D]`` arranged as :class:`QuestionGroups`."""
    feats = np.asarray(feats, dtype=np.float64)
    shift = perturbation_shift(feats[:, :, 0], feats[:, :, 1])
    variants = feats[:, :, 2:]
    return {"rsm": rsm(shift[:, 0], shift[:, 1:], eps),
            "dc": directional_collapse(shift[:, 0], shift[:, 1:], eps),
            "rsi": rsi(variants[:, 0], variants[:, 1:], eps)}


def compute_metrics(index: pd.DataFrame, features: np.ndarray, *, layers: list[int] | None = None,
                    eps: float = EPS, chunk_size: int = 32) -> pd.DataFrame:
    """Stage: the metrics table, one row per (question ``id``, ``layer``) with ``rsm``, ``dc``, ``rsi``.

    ``layers`` index the feature axis (``hidden_states``); the default probes ``0..L-1`` as the
    released code does (``hidden_states[i]`` for ``i < num_hidden_layers``: the embedding output and
    the first ``L - 1`` blocks' outputs, not the final normed output ``L``). Questions are
    processed in chunks to bound memory.
    """
    groups = group_rows(index)
    fewest = int((groups.rows[:, 1:, 0] >= 0).sum(axis=1).min())
    if fewest < 2:
        raise ValueError(f"standardising against neighbours needs at least 2 neighbours; a question has {fewest}")
    layers = list(range(features.shape[1] - 1)) if layers is None else list(layers)
    frames = []
    for start in range(0, len(groups.ids), chunk_size):
        rows = groups.rows[start:start + chunk_size]
        feats = features[np.maximum(rows, 0)][..., layers, :].astype(np.float64)
        feats[rows < 0] = np.nan                                  # a question's missing neighbours
        values = question_metrics(feats, eps)
        n = rows.shape[0]
        frames.append(pd.DataFrame({"id": np.repeat(groups.ids[start:start + n], len(layers)),
                                    "layer": np.tile(layers, n),
                                    **{name: values[name].reshape(-1) for name in METRIC_NAMES}}))
    table = pd.concat(frames, ignore_index=True)
    require_finite(f"LaRA metric values ({', '.join(METRIC_NAMES)})", table[list(METRIC_NAMES)].to_numpy())
    return table
