"""ADRA's training rewards (Appendix C): which suffixes a rollout is scored against, and how.

Every training row carries ``references`` (``adra.reward_reference``'s texts; index 0 is the candidate's own),
a ``rule`` and, for ADRA+, a membership ``weight`` w. With s_j the reconstruction score (``trio``
or ``ngram`` with length penalty tau, :mod:`mialab.training.rewards`) of the rollout
against reference j:

- ``own``: r = s_0 (ADRA);
- ``max``: r = max_j s_j. ADRA's option of also scoring a few random other candidates' suffixes
  (the reference implementation's variant), and the distillation pair rule: when a member and a
  non-member share a prefix, the pair is one example whose references are its two suffixes, and the
  rollout is rewarded for the better one;
- ``contrastive`` (ADRA+): r = p max(c_all) + (1 - p) max(c_dis) with p = 1 - w, c_all the scores
  against all references, c_dis against the K distractors (references 1..K).

Table 10's ablation ``embedding`` replaces the lexical score by ``(1 + cos) / 2`` of a sentence
encoder's embeddings of rollout and reference (the released code's ``embedding.py``: no length
penalty by default), under the same rules.

Table 10's ablation ``judge`` asks a local instruct model (``adra.reward.judge``, through the rollout
engine) to rate the similarity of rollout and reference with the released code's default prompt
(``resources/prompts/adra/judge.txt``, its ``llm_judge_prompts.PROMPT_TEMPLATE_V1``); the answer is
parsed as the code parses it (:func:`parse_judge_score`). The code's ``{PROBLEM}`` is the raw problem;
here it is the policy's prompt as the trainer holds it (the rendered user turn and assistant prefix).

The weights w come from a passive baseline's membership scores of the same candidates, min-max
normalised jointly and oriented so that lower w = more member-like (a likely member is rewarded for
its own suffix, a likely non-member also for resembling other candidates). Labels are never read.

ADRA+ scores each rollout against the true suffix and K distractor suffixes and rewards
``p * max(c_all) + (1 - p) * max(c_dis)`` with ``p = 1 - w``, where ``w`` in [0, 1] is the
min-max normalised passive membership score (lower ``w`` = more member-like). A likely member
is rewarded for reconstructing its own suffix best; a likely non-member is rewarded for
resembling other candidates, which sharpens the member / non-member contrast.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np
import pandas as pd

from mialab.core.finite import require_finite
from mialab.core.paths import PROMPTS
from mialab.similarity.metrics import embedding_cosine
from mialab.training.rewards import DEFAULT_TAU, completion_text, compute_rewards

RULES = ("own", "max", "contrastive")
JUDGE_PROMPT = PROMPTS / "adra" / "judge.txt"
_REWARD_LINE = re.compile(r"REWARD:\s*([0-9]*\.?[0-9]+)", re.IGNORECASE)
_UNIT_NUMBER = re.compile(r"\b(0\.\d{1,3}|1\.0{1,3}|0|1)\b")
log = logging.getLogger(__name__)


def parse_judge_score(text: str) -> float | None:
    """The judge's score in [0, 1] as the released code reads it (``_extract_reward_score``, 0-1 scale).

    The number after ``REWARD:`` (case-insensitive), clamped to [0, 1]; failing that, the last number of
    the form 0, 1, 0.ddd or 1.000 anywhere in the text; None when neither is there. Example:
    ``"REWARD: 0.750"`` -> 0.75; ``"about 0.4, maybe 0.6"`` -> 0.6; ``"REWARD: 7"`` -> 1.0.
    """
    found = _REWARD_LINE.search(text.strip()) if text else None
    if found:
        return min(1.0, max(0.0, float(found.group(1))))
    numbers = _UNIT_NUMBER.findall(text or "")
    return float(numbers[-1]) if numbers else None


def judge_scores(candidates: Sequence[str], references: Sequence[str], problems: Sequence[str],
                 generate: Callable[[list[str]], list[str]], template: str) -> np.ndarray:
    """The judge's score of each (candidate, reference, problem) triple, all prompts in one ``generate`` call.

    An answer without a score counts 0.0, the released code's rule (it logs a warning and returns 0.0).
    """
    prompts = [template.format(PROBLEM=p.strip(), REFERENCE_SOLUTION=r, CANDIDATE_SOLUTION=c)
               for c, r, p in zip(candidates, references, problems, strict=True)]
    parsed = [parse_judge_score(a) for a in generate(prompts)]
    if len(parsed) != len(prompts):
        raise ValueError(f"the judge answered {len(parsed)} of {len(prompts)} prompts")
    unparsed = sum(s is None for s in parsed)
    if unparsed:
        log.warning("LLM judge: %d of %d answers have no score; they count 0.0 (the released code's rule)",
                    unparsed, len(parsed))
    return np.array([0.0 if s is None else s for s in parsed])


def judge_generator(model: str, engine: str, backend_options: dict | None, temperature: float, top_p: float,
                    max_new_tokens: int, seed: int) -> Callable[[list[str]], list[str]]:
    """The judge (``adra.reward.judge``): each prompt one chat user turn to ``model`` on the rollout engine."""
    from mialab.lm.engine import text_generator

    return text_generator(model, engine=engine, backend_options=backend_options, max_new_tokens=max_new_tokens,
                          temperature=temperature, top_p=top_p, seed=seed)


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
    require_finite("contrastive reward scores", scores)
    require_finite("contrastive reward membership weights w", w)
    if ((w < 0) | (w > 1)).any():
        raise ValueError("membership weight w must lie in [0, 1]")
    p = 1.0 - w
    return p * scores.max(axis=-1) + (1.0 - p) * scores[..., 1:].max(axis=-1)


def minmax_membership_weight(scores: Sequence[float], higher_is_member: bool = True) -> np.ndarray:
    """Min-max normalise passive membership scores jointly into weights ``w`` in [0, 1].

    Oriented so that lower ``w`` = more member-like: with ``higher_is_member`` the highest
    score gets 0. All scores equal carries no information: every weight is 0.5.
    """
    s = require_finite("membership scores", scores)
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


def combine(scores: np.ndarray, rule: str, weight: float) -> float:
    """A rollout's reward from its scores against the row's references (module doc)."""
    if rule == "own":
        return float(scores[0])
    if rule == "max":
        return float(scores.max())
    if rule == "contrastive":
        return float(contrastive_reward(scores, np.float64(weight)))
    raise ValueError(f"unknown reward rule {rule!r}; known: {', '.join(RULES)}")


def adra_reward(metric: str = "trio", tau: float = DEFAULT_TAU, n_min: int = 3, n_max: int | None = 30,
                ngram_range: str = "dynamic", length_words: str = "whitespace", workers: int = 1,
                embedding_model: str | None = None, judge: dict | None = None):
    """A GRPO reward ``(completions, references, rule, weight, **kwargs) -> list[float]`` (TRL's signature).

    All (rollout, reference) pairs of a batch go through the batched kernel (or the embedding model, or
    the judge) in one call; the n-gram range and word counting are
    :func:`mialab.training.rewards.compute_rewards`'. ``judge``: ``adra.reward.judge``
    (:func:`judge_generator`'s arguments), its model started on the first call.
    """
    judge_model = functools.cache(lambda: judge_generator(**judge))

    def reconstruction_reward(completions: list, references: list, rule: list, weight: list, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        sizes = [len(r) for r in references]
        if min(sizes, default=1) < 1:
            raise ValueError("a training row has no reference suffix")
        cands, refs = [t for t, k in zip(texts, sizes) for _ in range(k)], [ref for refs in references for ref in refs]
        if metric == "embedding":
            flat = (1.0 + embedding_cosine(cands, refs, model=embedding_model)) / 2.0
        elif metric == "judge":
            problems = [completion_text(p) for p, k in zip(kwargs["prompts"], sizes) for _ in range(k)]
            flat = judge_scores(cands, refs, problems, judge_model(), JUDGE_PROMPT.read_text())
        else:
            flat = compute_rewards(metric, cands, refs, tau=tau, n_min=n_min, n_max=n_max, ngram_range=ngram_range,
                                   length_words=length_words, workers=workers)
        per_row = np.split(flat, np.cumsum(sizes)[:-1])
        values = np.array([combine(s, r, w) for s, r, w in zip(per_row, rule, weight, strict=True)])
        return require_finite(f"reward {metric}", values).tolist()

    if metric == "embedding" and not embedding_model:
        raise ValueError("the embedding reward needs embedding_model (adra.reward.embedding_model)")
    if metric == "judge" and not (judge or {}).get("model"):
        raise ValueError("the judge reward needs a judge model (adra.reward.judge.model)")
    reconstruction_reward.__name__ = f"adra_{metric}"
    return reconstruction_reward


def pair_partners(split: pd.DataFrame) -> dict[Hashable, Hashable]:
    """Candidate id -> the other candidate of its pair (``pair_id`` shared by exactly two rows of the split)."""
    if "pair_id" not in split.columns:
        return {}
    partners = {}
    for _, rows in split.groupby("pair_id", sort=False):
        if len(rows) == 2:
            a, b = rows["id"].tolist()
            partners[a], partners[b] = b, a
    return partners


def shares_prefix_pairs(split: pd.DataFrame) -> bool:
    """Whether the split is made of pairs that share one prefix (distillation: same problem, two traces)."""
    partners = pair_partners(split)
    if not partners:
        return False
    prefix = split.set_index("id")["prefix"]
    return all(prefix[a] == prefix[b] for a, b in partners.items())


def distractor_references(ids: Sequence[Hashable], targets: Sequence[str], k: int, *, seed: int,
                          forced: dict[Hashable, Hashable] | None = None, replace: bool = False) -> list[list[str]]:
    """Per candidate: its own target followed by the targets of K distractors drawn from the others."""
    by_id = dict(zip(ids, targets, strict=True))
    drawn = sample_distractors(ids, k, seed=seed, forced=forced, replace=replace)
    return [[by_id[c], *(by_id[d] for d in ds)] for c, ds in zip(ids, drawn)]


def membership_weights(baseline: pd.DataFrame, column: str, ids: Sequence[Hashable]) -> np.ndarray:
    """ADRA+'s w of each candidate of ``ids`` from a passive baseline's score table (higher = member).

    Reads only ``id`` and ``column``; min-max normalised over the candidates, lower w = more member-like.
    """
    if column not in baseline.columns:
        known = [c for c in baseline.columns if c not in ("id", "label", "n_tokens")]
        raise KeyError(f"membership-weight baseline {column!r} is not in the score table; known: {', '.join(known)}")
    scores = baseline[["id", column]].set_index("id")[column]
    missing = set(ids) - set(scores.index)
    if missing:
        raise KeyError(f"{len(missing)} candidates have no {column} score, e.g. {sorted(map(str, missing))[:3]}")
    return minmax_membership_weight(scores.loc[list(ids)].to_numpy(), higher_is_member=True)
