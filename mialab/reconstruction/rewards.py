"""ADRA reconstruction rewards (Appendix C.2) and the ADRA+ contrastive reward (Appendix C.3).

- ``trio``  = mean(token_overlap_ref, lcs_ratio_ref, ngram_coverage_ref) x length penalty;
- ``ngram`` = ngram_coverage_ref x length penalty.

Length penalty, with word counts ``l_c`` (candidate), ``l_r`` (reference; both counted in the
tokens of :mod:`mialab.reconstruction.tokenize`, so a CJK character is one word) and threshold ``tau``
(paper: 1.5): none when ``l_r / tau <= l_c <= l_r * tau``, else the score is multiplied by
``min(1, min(l_c / l_r, l_r / l_c))``. Both texts empty: factor 1 (the score is 0 anyway); exactly
one empty: factor 0.

ADRA+ scores each rollout against the true suffix and K distractor suffixes and rewards
``p * max(c_all) + (1 - p) * max(c_dis)`` with ``p = 1 - w``, where ``w`` in [0, 1] is the
min-max normalised passive membership score (lower ``w`` = more member-like). A likely member
is rewarded for reconstructing its own suffix best; a likely non-member is rewarded for
resembling other candidates, which sharpens the member / non-member contrast.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from mialab.reconstruction.kernel import lexical_metrics
from mialab.registry import Registry

DEFAULT_TAU = 1.5

RewardFn = Callable[..., np.ndarray]
REWARDS: Registry[RewardFn] = Registry("reward", plural="rewards")
#: Decorator: make a reward ``fn(metrics, *, tau) -> array`` available by name.
register_reward = REWARDS.register
known_rewards = REWARDS.known
#: The reward function called ``name``; an unknown name fails with the list of known ones.
get_reward = REWARDS.get


def length_penalty(n_cand: np.ndarray, n_ref: np.ndarray, tau: float = DEFAULT_TAU) -> np.ndarray:
    """Multiplicative length penalty of ADRA (module doc); 1 inside ``[l_r / tau, l_r * tau]``."""
    if not tau >= 1.0:
        raise ValueError(f"length-penalty threshold tau must be >= 1, got {tau}")
    lc = np.asarray(n_cand, dtype=np.float64)
    lr = np.asarray(n_ref, dtype=np.float64)
    inside = (lr / tau <= lc) & (lc <= lr * tau)
    both = (lc > 0) & (lr > 0)
    ratio = np.divide(np.minimum(lc, lr), np.maximum(lc, lr), out=np.zeros(np.broadcast(lc, lr).shape), where=both)
    return np.where(inside, 1.0, np.minimum(1.0, ratio))


@register_reward("trio")
def trio(metrics: Mapping[str, np.ndarray], *, tau: float = DEFAULT_TAU) -> np.ndarray:
    """Mean of token overlap, LCS ratio and n-gram coverage (all reference-normalised), length-penalised."""
    base = (np.asarray(metrics["token_overlap_ref"]) + np.asarray(metrics["lcs_ratio_ref"])
            + np.asarray(metrics["ngram_coverage_ref"])) / 3.0
    return base * length_penalty(metrics["n_cand"], metrics["n_ref"], tau)


@register_reward("ngram")
def ngram(metrics: Mapping[str, np.ndarray], *, tau: float = DEFAULT_TAU) -> np.ndarray:
    """N-gram coverage of the reference, length-penalised."""
    return np.asarray(metrics["ngram_coverage_ref"]) * length_penalty(metrics["n_cand"], metrics["n_ref"], tau)


def compute_rewards(name: str, candidates: Sequence[str], references: Sequence[str], *, tau: float = DEFAULT_TAU,
                    n_min: int = 3, n_max: int | None = None, workers: int = 1) -> np.ndarray:
    """Reward ``name`` of every (candidate, reference) pair through the fast batched kernel."""
    fn = get_reward(name)
    metrics = lexical_metrics(candidates, references, n_min=n_min, n_max=n_max, workers=workers)
    return fn({k: metrics[k].to_numpy() for k in metrics.columns}, tau=tau)


def contrastive_reward(scores: np.ndarray, w: np.ndarray) -> np.ndarray:
    """ADRA+ reward ``p * max(c_all) + (1 - p) * max(c_dis)``, ``p = 1 - w``.

    ``scores[..., 0]`` is the rollout's score against its true suffix and ``scores[..., 1:]``
    against the K >= 1 distractors; ``w`` (broadcast over the leading axes) is the membership
    weight in [0, 1]. Example: scores [0.8, 0.5, 0.3], w = 0.9 -> 0.1 * 0.8 + 0.9 * 0.5 = 0.53.
    """
    scores = np.asarray(scores, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    if scores.ndim < 1 or scores.shape[-1] < 2:
        raise ValueError(f"need scores against the true suffix and >= 1 distractor, got shape {scores.shape}")
    if not (np.isfinite(scores).all() and np.isfinite(w).all()):
        raise ValueError("contrastive reward got NaN/inf scores or weights")
    if ((w < 0) | (w > 1)).any():
        raise ValueError("membership weight w must lie in [0, 1]")
    p = 1.0 - w
    return p * scores.max(axis=-1) + (1.0 - p) * scores[..., 1:].max(axis=-1)


def minmax_membership_weight(scores: Sequence[float], higher_is_member: bool = True) -> np.ndarray:
    """Min-max normalise passive membership scores jointly into weights ``w`` in [0, 1].

    Oriented so that lower ``w`` = more member-like: with ``higher_is_member`` the highest
    score gets 0. All scores equal carries no information: every weight is 0.5.
    """
    s = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(s).all():
        raise ValueError("membership scores contain NaN/inf")
    if s.size == 0:
        return s
    lo, hi = s.min(), s.max()
    if hi == lo:
        return np.full_like(s, 0.5)
    w = (s - lo) / (hi - lo)
    return 1.0 - w if higher_is_member else w


def sample_distractors(ids: Sequence[Hashable], k: int, *, seed: int,
                       forced: Mapping[Hashable, Hashable] | None = None) -> list[list[Hashable]]:
    """K distractor ids per candidate: i.i.d. uniform draws from the *other* candidates, seeded.

    ``forced`` maps a candidate id to a distractor it must get first (e.g. the paired article of
    WikiMIA-24 Hard); the remaining K - 1 are drawn. A candidate is never its own distractor.
    """
    ids = list(ids)
    n = len(ids)
    if len(set(ids)) != n:
        raise ValueError("candidate ids must be unique")
    if k < 1 or n < 2:
        raise ValueError(f"need k >= 1 and at least 2 candidates, got k={k}, {n} candidates")
    forced = dict(forced or {})
    position = {c: i for i, c in enumerate(ids)}
    for c, d in forced.items():
        if c not in position or d not in position or c == d:
            raise ValueError(f"forced distractor {d!r} for {c!r} must be another known candidate")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n - 1, size=(n, k))
    draws += draws >= np.arange(n)[:, None]  # skip self: uniform over the other n - 1
    out = []
    for i, c in enumerate(ids):
        picked = [ids[j] for j in draws[i]]
        if c in forced:
            picked = [forced[c], *picked[: k - 1]]
        out.append(picked)
    return out
