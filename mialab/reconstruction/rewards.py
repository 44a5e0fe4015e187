"""ADRA reconstruction rewards (Appendix C.2) and the ADRA+ contrastive reward (Appendix C.3).

- ``trio``  = mean(token_overlap_ref, lcs_ratio_ref, ngram_coverage_ref) x length penalty;
- ``ngram`` = ngram_coverage_ref x length penalty.

Length penalty, with word counts ``l_c`` (candidate), ``l_r`` (reference) and threshold ``tau``
(paper: 1.5): none when ``1 / tau <= l_c / l_r <= tau``, else the score is multiplied by
``min(1, min(l_c / l_r, l_r / l_c))``; ``l_r = 0``: factor 1 if ``l_c = 0`` else 0. Words are
counted as the released code counts them, whitespace-separated (``length_words="whitespace"``),
or in the metric tokens of :mod:`mialab.reconstruction.tokenize` (``"tokens"``, a CJK character
is one word: the paper's text).

N-gram range of the reward (:func:`compute_rewards`): the released code's training runs use
``[n_min, longest greedy match <= 30]`` (``ngram_range="dynamic"``, its ``ADRA_USE_DYNAMIC_MAX_NGRAM``
mode, ``adra.reward``'s default), its fixed mode ``[n_min, 30]`` (``"fixed"`` with ``n_max=30``); the paper's
text ``[n_min, LCS]`` is ``"fixed"`` with ``n_max=None``.

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
NGRAM_RANGES = ("dynamic", "fixed")
LENGTH_WORDS = ("whitespace", "tokens")

RewardFn = Callable[..., np.ndarray]
REWARDS: Registry[RewardFn] = Registry("reward", plural="rewards")
#: Decorator: make a reward ``fn(metrics, *, tau) -> array`` available by name.
register_reward = REWARDS.register
known_rewards = REWARDS.known
#: The reward function called ``name``; an unknown name fails with the list of known ones.
get_reward = REWARDS.get


def length_penalty(n_cand: np.ndarray, n_ref: np.ndarray, tau: float = DEFAULT_TAU) -> np.ndarray:
    """Multiplicative length penalty of ADRA (module doc), in the code's arithmetic (``l_c / l_r`` against
    ``1 / tau`` and ``tau``, so boundary cases round as there)."""
    if not tau >= 1.0:
        raise ValueError(f"length-penalty threshold tau must be >= 1, got {tau}")
    lc = np.asarray(n_cand, dtype=np.float64)
    lr = np.asarray(n_ref, dtype=np.float64)
    shape = np.broadcast(lc, lr).shape
    short = np.divide(lc, lr, out=np.zeros(shape), where=lr > 0)
    long = np.divide(lr, lc, out=np.zeros(shape), where=lc > 0)
    inside = (short >= 1 / tau) & (short <= tau)
    factor = np.where(inside, 1.0, np.minimum(1.0, np.minimum(short, long)))
    return np.where(lr > 0, factor, (lc == 0).astype(np.float64))


def word_counts(metrics: Mapping[str, np.ndarray], length_words: str) -> tuple[np.ndarray, np.ndarray]:
    """(candidate, reference) word counts of the length penalty (module doc)."""
    if length_words not in LENGTH_WORDS:
        raise ValueError(f"unknown length_words {length_words!r}; known: {', '.join(LENGTH_WORDS)}")
    return ((metrics["words_cand"], metrics["words_ref"]) if length_words == "whitespace"
            else (metrics["n_cand"], metrics["n_ref"]))


@register_reward("trio")
def trio(metrics: Mapping[str, np.ndarray], *, tau: float = DEFAULT_TAU, length_words: str = "tokens") -> np.ndarray:
    """Mean of token overlap, LCS ratio and n-gram coverage (all reference-normalised), length-penalised."""
    base = (np.asarray(metrics["token_overlap_ref"]) + np.asarray(metrics["lcs_ratio_ref"])
            + np.asarray(metrics["ngram_coverage_ref"])) / 3.0
    return base * length_penalty(*word_counts(metrics, length_words), tau)


@register_reward("ngram")
def ngram(metrics: Mapping[str, np.ndarray], *, tau: float = DEFAULT_TAU, length_words: str = "tokens") -> np.ndarray:
    """N-gram coverage of the reference, length-penalised."""
    return np.asarray(metrics["ngram_coverage_ref"]) * length_penalty(*word_counts(metrics, length_words), tau)


def compute_rewards(name: str, candidates: Sequence[str], references: Sequence[str], *, tau: float = DEFAULT_TAU,
                    n_min: int = 3, n_max: int | None = None, ngram_range: str = "fixed",
                    length_words: str = "tokens", workers: int = 1) -> np.ndarray:
    """Reward ``name`` of every (candidate, reference) pair through the fast batched kernel (module doc).

    The defaults are the paper's text; ADRA's config defaults (``adra.reward``) are the released code's.
    """
    fn = get_reward(name)
    if ngram_range not in NGRAM_RANGES:
        raise ValueError(f"unknown ngram_range {ngram_range!r}; known: {', '.join(NGRAM_RANGES)}")
    metrics = lexical_metrics(candidates, references, n_min=n_min, n_max=n_max, dynamic=ngram_range == "dynamic",
                              workers=workers)
    return fn({k: metrics[k].to_numpy() for k in metrics.columns}, tau=tau, length_words=length_words)


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


def sample_distractors(ids: Sequence[Hashable], k: int, *, seed: int, forced: Mapping[Hashable, Hashable] | None = None,
                       replace: bool = False) -> list[list[Hashable]]:
    """K distractor ids per candidate, uniform over the *other* candidates, seeded.

    Without replacement by default (the released code's ``rng.sample``; K is capped at the number
    of other candidates, as there); ``replace=True`` draws i.i.d. ``forced`` maps a candidate id to a
    distractor it must get first (e.g. the paired article of WikiMIA-24 Hard); the remaining K - 1
    are drawn from the rest. A candidate is never its own distractor.
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
    out = []
    for i, c in enumerate(ids):
        first = [position[forced[c]]] if c in forced else []
        others = np.array([j for j in range(n) if j != i and j not in first])
        want = k - len(first)
        if replace:
            drawn = others[rng.integers(0, len(others), size=want)] if len(others) else others[:0]
        else:
            drawn = rng.choice(others, size=min(want, len(others)), replace=False) if len(others) else others
        out.append([ids[j] for j in [*first, *drawn.tolist()]])
    return out
