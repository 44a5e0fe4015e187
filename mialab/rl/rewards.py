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


@register_rl_reward("reconstruction")
def reconstruction(metric: str = "trio", reference_column: str = "reference", tau: float = DEFAULT_TAU,
                   n_min: int = 3) -> RewardFunction:
    """ADRA reconstruction reward ``metric`` (``trio`` / ``ngram``) of the completion vs the reference column."""

    def reconstruction_reward(completions: list, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        values = compute_rewards(metric, texts, list(kwargs[reference_column]), tau=tau, n_min=n_min)
        return _checked(f"reconstruction/{metric}", values, len(completions))

    return reconstruction_reward
