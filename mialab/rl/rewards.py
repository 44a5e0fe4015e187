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
  :func:`mialab.reconstruction.rewards.compute_rewards`. A reward a tiny model can earn: it grows
  with the overlap of a generated solution with the reference solution.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from mialab.reconstruction.rewards import DEFAULT_TAU, compute_rewards
from mialab.registry import Registry

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
    if not np.isfinite(values).all():
        raise ValueError(f"reward {name}: {int((~np.isfinite(values)).sum())} non-finite value(s)")
    return values.tolist()


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
