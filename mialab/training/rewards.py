"""Reward callables for GRPO: ``reward(completions, **columns) -> list[float]``.

TRL's ``GRPOTrainer`` calls a reward with the keyword arguments ``prompts``, ``completions``,
``completion_ids``, every extra column of the training set (as one list per column, aligned with
the completions) and trainer hooks (``trainer_state``, ``log_extra``, ``log_metric``), so every
reward accepts ``**kwargs`` and reads only the columns it needs. A reward must be finite: NaN or
inf is an error, never a skipped sample.

Registered rewards (:func:`make_reward` builds one from a config entry):

- ``answer_match``: 1 when the completion's final answer (the last ``\\boxed{...}``, else the last
  number) equals the reference answer (column ``reference``) after normalisation, else 0. The
  verifiable reward of RL on math problems (AIME answers are integers 0-999).
- ``math_verify``: the LaRA paper's RL reward (its verl ``reward_impl_version=3``): 1 when the
  ``math-verify`` package finds the completion's answer equal to ``$reference$``, else 0. With
  ``think`` (the code's default) the completion is read after ``"<think>\n"`` and only its part
  after the first ``</think>`` is verified; a completion without ``</think>`` earns 0 (version 4,
  ``think: false``, verifies the whole completion).
- ``reconstruction``: an ADRA reconstruction reward (``trio`` or ``ngram``, length-penalised) of
  the completion against the ``reference`` column, computed by
  :func:`compute_rewards`. A reward a tiny model can earn: it grows
  with the overlap of a generated solution with the reference solution.

Reconstruction rewards (ADRA, Appendix C.2), registered by name:

- ``trio``  = mean(token_overlap_ref, lcs_ratio_ref, ngram_coverage_ref) x length penalty;
- ``ngram`` = ngram_coverage_ref x length penalty.

Length penalty, with word counts ``l_c`` (candidate), ``l_r`` (reference) and threshold ``tau``
(paper: 1.5): none when ``1 / tau <= l_c / l_r <= tau``, else the score is multiplied by
``min(1, min(l_c / l_r, l_r / l_c))``; ``l_r = 0``: factor 1 if ``l_c = 0`` else 0. Words are
counted as the released code counts them, whitespace-separated (``length_words="whitespace"``),
or in the metric tokens of :mod:`mialab.text.words` (``"tokens"``, a CJK character
is one word: the paper's text).

N-gram range of the reward (:func:`compute_rewards`): the released code's training runs use
``[n_min, longest greedy match <= 30]`` (``ngram_range="dynamic"``, its ``ADRA_USE_DYNAMIC_MAX_NGRAM``
mode, ``adra.reward``'s default), its fixed mode ``[n_min, 30]`` (``"fixed"`` with ``n_max=30``); the paper's
text ``[n_min, LCS]`` is ``"fixed"`` with ``n_max=None``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from mialab.core.finite import require_finite
from mialab.core.registry import Registry
from mialab.similarity.kernel import lexical_counts
from mialab.similarity.metrics import COUNT_NAMES, LEXICAL_METRICS, metric_counts, metrics_from_counts

DEFAULT_TAU = 1.5
NGRAM_RANGES = ("dynamic", "fixed")
#: The (candidate, reference) word counts of the length penalty, by ``length_words``.
LENGTH_COUNTS = {"whitespace": ("words_cand", "words_ref"), "tokens": ("n_cand", "n_ref")}
LENGTH_WORDS = tuple(LENGTH_COUNTS)

RewardFn = Callable[..., np.ndarray]
REWARDS: Registry[RewardFn] = Registry("reward", plural="rewards")
#: Decorator: make a reward ``fn(metrics, *, tau) -> array`` available by name.
register_reward = REWARDS.register
known_rewards = REWARDS.known
#: The reward function called ``name``; an unknown name fails with the list of known ones.
get_reward = REWARDS.get
#: The metrics each registered reward reads (:func:`compute_rewards` computes only these; a reward
#: missing here gets every lexical metric).
REWARD_METRICS = {"trio": ("token_overlap_ref", "lcs_ratio_ref", "ngram_coverage_ref"),
                  "ngram": ("ngram_coverage_ref",)}


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
    if length_words not in LENGTH_COUNTS:
        raise ValueError(f"unknown length_words {length_words!r}; known: {', '.join(LENGTH_WORDS)}")
    cand, ref = LENGTH_COUNTS[length_words]
    return metrics[cand], metrics[ref]


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
    """Reward ``name`` of every (candidate, reference) pair through the fast batched kernel (module doc),
    which computes only the counts of the reward's metrics (``REWARD_METRICS``) and word counts.

    The defaults are the paper's text; ADRA's config defaults (``adra.reward``) are the released code's.
    """
    fn = get_reward(name)
    if ngram_range not in NGRAM_RANGES:
        raise ValueError(f"unknown ngram_range {ngram_range!r}; known: {', '.join(NGRAM_RANGES)}")
    if length_words not in LENGTH_COUNTS:
        raise ValueError(f"unknown length_words {length_words!r}; known: {', '.join(LENGTH_WORDS)}")
    names = REWARD_METRICS.get(name, LEXICAL_METRICS)
    needed = set(metric_counts(names)) | set(LENGTH_COUNTS[length_words])
    counts = lexical_counts(candidates, references, n_min=n_min, n_max=n_max, dynamic=ngram_range == "dynamic",
                            workers=workers, counts=[k for k in COUNT_NAMES if k in needed])
    return fn(metrics_from_counts(counts, names=names), tau=tau, length_words=length_words)


RewardFunction = Callable[..., list[float]]
RL_REWARDS: Registry[Callable[..., RewardFunction]] = Registry("RL reward")
#: Decorator: make a reward factory ``(**options) -> reward`` available by name.
register_rl_reward = RL_REWARDS.register
known_rl_rewards = RL_REWARDS.known

BOXED = re.compile(r"\\boxed\s*\{")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def make_reward(spec: dict) -> RewardFunction:
    """The reward a config entry ``{name: ..., **options}`` describes."""
    options = dict(spec)
    name = options.pop("name")
    return RL_REWARDS.get(name)(**options)


def _checked(name: str, values: np.ndarray, n: int) -> list[float]:
    """Rewards as floats, after checking there is one finite value per completion."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (n,):
        raise ValueError(f"reward {name}: {values.shape} values for {n} completions")
    return require_finite(f"reward {name}", values).tolist()


def completion_text(completion) -> str:
    """The text of a completion: a string (standard format) or ``[{"role", "content"}]`` (chat format)."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    starts = [m.end() for m in BOXED.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return None


def normalise_answer(answer: str) -> str:
    """Comparable form of a final answer: no spaces, ``$`` or thousands commas; an integer-valued
    number without leading zeros or trailing ``.0`` (``"017"`` and ``"17.0"`` give ``"17"``)."""
    text = re.sub(r"[\s$]|\\[,!;: ]", "", str(answer)).replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def final_answer(completion: str) -> str | None:
    """The final answer of a solution: the last ``\\boxed{...}``, else the last number, else None."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    numbers = NUMBER.findall(completion)
    return numbers[-1] if numbers else None


@register_rl_reward("answer_match")
def answer_match(reference_column: str = "reference") -> RewardFunction:
    """Reward 1.0 when the completion's :func:`final_answer` matches the reference answer, else 0.0."""

    def answer_match_reward(completions: list, **kwargs) -> list[float]:
        answers = kwargs[reference_column]
        got = [final_answer(completion_text(c)) for c in completions]
        values = [float(g is not None and normalise_answer(g) == normalise_answer(a)) for g, a in zip(got, answers,
                                                                                                     strict=True)]
        return _checked("answer_match", np.array(values), len(completions))

    return answer_match_reward


THINK_START, THINK_END = "<think>", "</think>"


def math_verified(completion: str, reference: str, think: bool = True) -> bool:
    """The code's ``labeling_responses`` on one completion (module doc)."""
    from math_verify import parse, verify

    if think:
        text = f"{THINK_START}\n{completion}"
        if THINK_END not in text:
            return False
        completion = text.split(THINK_END)[1]
    return bool(verify(parse(f"${reference}$"), parse(completion)))


@register_rl_reward("math_verify")
def math_verify(reference_column: str = "reference", think: bool = True) -> RewardFunction:
    """Reward 1.0 when math-verify accepts the completion's answer (:func:`math_verified`), else 0.0."""

    def math_verify_reward(completions: list, **kwargs) -> list[float]:
        values = [float(math_verified(completion_text(c), str(a), think))
                  for c, a in zip(completions, kwargs[reference_column], strict=True)]
        return _checked("math_verify", np.array(values), len(completions))

    return math_verify_reward


@register_rl_reward("reconstruction")
def reconstruction(metric: str = "trio", reference_column: str = "reference", tau: float = DEFAULT_TAU,
                   n_min: int = 3) -> RewardFunction:
    """ADRA reconstruction reward ``metric`` (``trio`` / ``ngram``) of the completion vs the reference column."""

    def reconstruction_reward(completions: list, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        values = compute_rewards(metric, texts, list(kwargs[reference_column]), tau=tau, n_min=n_min)
        return _checked(f"reconstruction/{metric}", values, len(completions))

    return reconstruction_reward
