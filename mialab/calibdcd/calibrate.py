"""CalibDCD end to end: shift detection, bounded correction, the retrained detector, the ablations.

Inputs are feature matrices: the supervised split under the original query (with its labels),
and the known non-members D-cal under the original query and every controlled view. D-cal needs
no labels (every row is a known non-member) and must be disjoint from the supervised split; the
evaluation pool is only scored, under the original query, after calibration is fixed, so its
labels are never read here.

Ablations (Table 4, Sec. 5.4) are named :data:`VARIANTS`, each changing one component.

False-positive recovery (Sec. 5.4): take the kept view with the highest FPP; the original
detector flags the calibration non-members whose score under that view exceeds its 5%-FPR
threshold; the recovery rate is the share of them the calibrated detector clears (score at or
below its own 5%-FPR threshold) under the same view. The paper does not say on which scores the
thresholds are set; here each detector's threshold is set on its own scores of D-cal under the
original query (at most 5% of D-cal scores strictly above it, :func:`fpr_threshold`), so no
evaluation label is used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from mialab.calibdcd.checks import require_finite, require_matrix
from mialab.calibdcd.classifiers import Classifier, make_classifier
from mialab.calibdcd.correction import (
    LAMBDAS,
    RANKS,
    apply_correction,
    correction_objective,
    select_correction,
)
from mialab.calibdcd.features import veilprobe_blocks
from mialab.calibdcd.frames import view_matrices
from mialab.calibdcd.shift import (
    consensus_basis,
    false_positive_pressure,
    random_views,
    score_increase,
    shift_weights,
    top_views,
    view_basis,
)
from mialab.calibdcd.views import ORIGINAL


@dataclass(frozen=True)
class Variant:
    """One CalibDCD configuration; each ablation changes one field of the default."""

    view_selection: str = "fpp"          # "fpp": top views by FPP; "random": seeded random views
    n_views: int = 3
    consensus: bool = True               # False: top-r eigenvectors of G without the tau filter
    weighting: str = "clipped_score"     # or "binary" (1 where the score rose)
    ranks: tuple[int, ...] = RANKS
    lambdas: tuple[float, ...] = LAMBDAS
    allow_identity: bool = True          # False: apply the (single) candidate even if J <= 0


VARIANTS: dict[str, Variant] = {
    "calibdcd": Variant(),
    "random3": Variant(view_selection="random"),
    "top1": Variant(n_views=1),
    "no_consensus": Variant(consensus=False),
    "binary_weights": Variant(weighting="binary"),
    "full_correction": Variant(lambdas=(1.0,)),
    "fixed_r3_l09": Variant(ranks=(3,), lambdas=(0.9,), allow_identity=False),
}


def get_variant(name: str) -> Variant:
    """The CalibDCD variant registered as ``name``."""
    if name not in VARIANTS:
        raise KeyError(f"unknown CalibDCD variant {name!r}; known: {sorted(VARIANTS)}")
    return VARIANTS[name]


@dataclass(frozen=True)
class DetectorSpec:
    """A feature-based detector as CalibDCD sees it: its classifier family and correctable block."""

    classifier: str
    block: Callable[[int], slice]


DETECTORS: dict[str, DetectorSpec] = {
    "dpdllm": DetectorSpec("gaussian_nb", lambda dim: slice(0, dim)),
    "veilprobe": DetectorSpec("veilprobe_protonet", lambda dim: veilprobe_blocks(dim)["output"]),
}


def get_detector(name: str) -> DetectorSpec:
    """The detector registered as ``name``."""
    if name not in DETECTORS:
        raise KeyError(f"unknown detector {name!r}; known: {sorted(DETECTORS)}")
    return DETECTORS[name]


class FitCache:
    """Fitted classifiers by (family, seed, features, labels), shared by the variants of one calibration.

    Every variant fits the same original classifier on the same supervised features, and a variant
    whose selected correction is the identity retrains it on unchanged features: with seeded,
    deterministic fits, these are the same classifier (VeilProbe's network fits take most of the
    calibration's time). Classifiers are not changed by scoring, so sharing one is safe.
    """

    def __init__(self):
        self._fits: dict[tuple, Classifier] = {}

    def fit(self, family: str, seed: int, X: np.ndarray, y: np.ndarray) -> Classifier:
        X, y = np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y)
        key = (family, seed, X.shape, hashlib.sha256(X.tobytes()).hexdigest(), y.astype(np.int64).tobytes())
        if key not in self._fits:
            self._fits[key] = make_classifier(family, seed).fit(X, y)
        return self._fits[key]


@dataclass
class Calibration:
    """A fitted CalibDCD calibration: the selected correction and the original and retrained classifiers."""

    detector: str
    variant: str
    block: slice
    fpp: pd.Series                 # FPP per controlled view
    views: list[str]               # kept views
    objective: pd.DataFrame        # rank, lam, basis_dim, J for every candidate
    rank: int                      # selected r (0: identity)
    lam: float                     # selected lambda (0: identity)
    basis: np.ndarray              # B_r* (block dim x k)
    original: Classifier = field(repr=False)
    final: Classifier = field(repr=False)

    def transform(self, z: np.ndarray) -> np.ndarray:
        """``T_A*(z)``: the selected bounded correction of the correctable block."""
        return apply_correction(z, self.basis, self.lam, self.block)

    def score(self, z: np.ndarray) -> np.ndarray:
        """The calibrated detector's member probability ``q_final(T_A*(z))``."""
        return self.final.score(self.transform(z))


def calibrate(z_supervised: np.ndarray, y_supervised: np.ndarray, z_calibration: Mapping[str, np.ndarray], *,
              detector: str, tau: float, tolerance: float, variant: str = "calibdcd", seed: int = 0,
              fits: FitCache | None = None) -> Calibration:
    """Fit CalibDCD.

    ``z_calibration`` maps view names to the D-cal feature matrices (same rows in the same order),
    ``original`` (``e0``) included; every other key is a controlled view. ``tau``: the cross-view
    consensus threshold, ``tolerance``: the (r, lambda) selection's (config ``calibdcd.tau`` /
    ``tolerance``). ``fits``: a cache shared by calibrations of the same data (every variant), so
    equal classifiers are fitted once.
    """
    fits = fits if fits is not None else FitCache()
    spec, cfg = get_detector(detector), get_variant(variant)
    if ORIGINAL not in z_calibration:
        raise KeyError(f"calibration features lack the original view {ORIGINAL!r}")
    z0 = require_matrix("calibration features (original view)", z_calibration[ORIGINAL])
    z_sup = require_matrix("supervised features", z_supervised, n_cols=z0.shape[1])
    controlled = [v for v in z_calibration if v != ORIGINAL]
    if not controlled:
        raise ValueError("no controlled view in the calibration features")
    z_views = {v: require_matrix(f"calibration features ({v})", z_calibration[v], n_cols=z0.shape[1])
               for v in controlled}
    if any(z.shape != z0.shape for z in z_views.values()):
        raise ValueError("every view needs the same calibration rows as the original view")
    block = spec.block(z0.shape[1])

    q = fits.fit(spec.classifier, seed, z_sup, y_supervised)
    q0 = q.score(z0)
    increases = {v: score_increase(q0, q.score(z)) for v, z in z_views.items()}
    fpp = false_positive_pressure(increases)
    kept = top_views(fpp, cfg.n_views) if cfg.view_selection == "fpp" else random_views(controlled, cfg.n_views, seed)

    bases, rows = {}, []
    for r in cfg.ranks:
        view_bases = [view_basis((z_views[v] - z0)[:, block], shift_weights(increases[v], cfg.weighting), r)
                      for v in kept]
        bases[r] = consensus_basis(view_bases, tau) if cfg.consensus else consensus_basis(view_bases, 0.0, r)
        for lam in cfg.lambdas:
            rows.append({"rank": r, "lam": lam, "basis_dim": bases[r].shape[1],
                         "J": correction_objective(q.score, z0, bases[r], lam, block)})
    objective = pd.DataFrame(rows)
    rank, lam = select_correction(objective, tolerance, allow_identity=cfg.allow_identity)
    basis = bases[rank] if rank else np.zeros((block.stop - block.start, 0))
    final = fits.fit(spec.classifier, seed, apply_correction(z_sup, basis, lam, block), y_supervised)
    return Calibration(detector, variant, block, fpp, kept, objective, rank, lam, basis, q, final)


def fpr_threshold(nonmember_scores: np.ndarray, fpr: float = 0.05) -> float:
    """The 5%-FPR (``fpr``) operating threshold on known non-members: the ``(n - k)``-th smallest of
    their ``n`` scores with ``k = floor(fpr * n)``, so at most ``k`` of them lie strictly above it."""
    scores = np.sort(require_finite("non-member scores", nonmember_scores))
    if not 0.0 <= fpr < 1.0 or scores.size == 0:
        raise ValueError(f"need fpr in [0, 1) and at least one score, got fpr={fpr}, {scores.size} scores")
    return float(scores[scores.size - 1 - int(np.floor(fpr * scores.size))])


def recovery_analysis(calibration: Calibration, z_calibration: Mapping[str, np.ndarray], fpr: float = 0.05) -> dict:
    """False-positive recovery under the highest-FPP kept view (definition in the module docstring)."""
    view = max(calibration.views, key=lambda v: calibration.fpp[v])
    z0, zv = z_calibration[ORIGINAL], z_calibration[view]
    t_original = fpr_threshold(calibration.original.score(z0), fpr)
    t_calibrated = fpr_threshold(calibration.score(z0), fpr)
    flagged = calibration.original.score(zv) > t_original
    recovered = flagged & (calibration.score(zv) <= t_calibrated)
    n_flagged = int(flagged.sum())
    return {"view": view, "fpr": fpr, "threshold_original": t_original, "threshold_calibrated": t_calibrated,
            "n_calibration": int(len(z0)), "flagged": n_flagged, "recovered": int(recovered.sum()),
            "recovery_rate": float(recovered.sum() / n_flagged) if n_flagged else None}


@dataclass
class CalibDCDRun:
    """What one CalibDCD stage writes: pool scores, the view table, the objective table, a summary."""

    scores: pd.DataFrame           # id, score_original, score_calibrated (evaluation pool, original query)
    views: pd.DataFrame            # view, fpp, kept
    objective: pd.DataFrame        # rank, lam, basis_dim, J, selected
    summary: dict


def _original_view(frame: pd.DataFrame, ids: list[str], what: str) -> np.ndarray:
    """The ``original``-view feature matrix of ``ids`` from a feature table."""
    rows = frame[frame["view"] == ORIGINAL]
    if rows.empty:
        raise ValueError(f"{what} feature table has no {ORIGINAL!r} view rows")
    return view_matrices(rows, ids)[ORIGINAL]


def run_calibdcd(supervised: pd.DataFrame, supervised_labels: pd.DataFrame, calibration: pd.DataFrame,
                 pool: pd.DataFrame, *, detector: str, tau: float, tolerance: float, variant: str = "calibdcd",
                 seed: int = 0, fits: FitCache | None = None) -> CalibDCDRun:
    """Stage entry: calibrate on feature tables (:mod:`mialab.calibdcd.frames`) and score the pool.

    ``supervised`` / ``pool`` need the ``original`` view rows; ``calibration`` the original and the
    controlled views; ``supervised_labels`` has columns ``id``, ``label`` (the supervised split).
    The pool's labels are not an input. ``fits``: as for :func:`calibrate`.
    """
    labels = supervised_labels.set_index(supervised_labels["id"].astype(str))["label"]
    sup_ids = labels.index.tolist()
    cal_ids = calibration.loc[calibration["view"] == ORIGINAL, "id"].astype(str).tolist()
    overlap = set(sup_ids) & set(cal_ids)
    if overlap:
        raise ValueError(f"calibration set overlaps the supervised split ({len(overlap)} ids, "
                         f"e.g. {sorted(overlap)[:3]})")
    z_sup = _original_view(supervised, sup_ids, "supervised")
    z_cal = view_matrices(calibration, cal_ids)
    pool_ids = pool.loc[pool["view"] == ORIGINAL, "id"].astype(str).tolist()
    z_pool = _original_view(pool, pool_ids, "pool")

    fit = calibrate(z_sup, labels.to_numpy(), z_cal, detector=detector, variant=variant, tau=tau,
                    tolerance=tolerance, seed=seed, fits=fits)
    scores = pd.DataFrame({"id": pool_ids, "score_original": fit.original.score(z_pool),
                           "score_calibrated": fit.score(z_pool)})
    views = pd.DataFrame({"view": fit.fpp.index, "fpp": fit.fpp.to_numpy(), "kept": fit.fpp.index.isin(fit.views)})
    objective = fit.objective.assign(selected=(fit.objective["rank"] == fit.rank) & (fit.objective["lam"] == fit.lam))
    summary = {"detector": detector, "variant": variant, "seed": seed, "tau": tau, "tolerance": tolerance,
               "kept_views": fit.views, "rank": fit.rank, "lam": fit.lam, "basis_dim": int(fit.basis.shape[1]),
               "n_supervised": len(sup_ids), "n_calibration": len(cal_ids), "n_pool": len(pool_ids),
               "recovery": recovery_analysis(fit, z_cal)}
    require_finite("pool scores", scores[["score_original", "score_calibrated"]].to_numpy())
    return CalibDCDRun(scores, views, objective, summary)
