"""Reconstruction tasks: the prompt a candidate is given and the text its rollouts must reconstruct.

One task per dataset (config ``n_sampling.tasks.<dataset>``), shared by N-Sampling and by ADRA's
training and evaluation, so all of them see identical prompts:

- ``template``: name of a prompt template ``resources/prompts/n_sampling/<name>.txt``, a
  ``str.format`` string with a ``{prefix}`` field (ADRA Appendix A, Table 11); one trailing newline
  of the file is not part of the template;
- ``assistant_prefix_ratio`` p: the first ``max(assistant_prefix_min_words, floor(p * n))`` suffix words
  (p > 0; min words 1, the released code, or 0) are given as the start of the model's answer (ADRA:
  p = 25%); rollouts are then compared with the rest of the suffix only (the suffix-only protocol)
  and ADRA's reward ignores the given words;
- ``max_new_tokens``: rollout length (the paper: half the dataset's maximum token count);
- ``max_prompt_tokens``: a prompt longer than this loses its *first* prefix words until it fits
  (the words nearest the suffix stay), so prompt + rollout fit the model's context.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mialab.core.paths import PROMPTS
from mialab.lm.prompts import prompt_text, prompt_token_ids
from mialab.text.prefix import split_assistant_prefix

TEMPLATE_DIR = PROMPTS / "n_sampling"


def known_templates(directory: str | Path = TEMPLATE_DIR) -> list[str]:
    """Names of the prompt templates in ``directory``, sorted."""
    return sorted(p.stem for p in Path(directory).glob("*.txt"))


def load_template(name: str, directory: str | Path = TEMPLATE_DIR) -> str:
    """The prompt template called ``name``; an unknown name fails with the list of known ones."""
    path = Path(directory) / f"{name}.txt"
    if not path.is_file():
        raise KeyError(f"unknown prompt template {name!r}; known: {', '.join(known_templates(directory))}")
    text = path.read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


@dataclass(frozen=True)
class Task:
    """A dataset's reconstruction task (module doc): an ``n_sampling.tasks.<dataset>`` entry (the schema fills
    its defaults)."""

    template: str
    assistant_prefix_ratio: float
    max_new_tokens: int
    max_prompt_tokens: int | None
    assistant_prefix_min_words: int

    def __post_init__(self) -> None:
        if not 0.0 <= self.assistant_prefix_ratio < 1.0:
            raise ValueError(f"assistant_prefix_ratio must be in [0, 1), got {self.assistant_prefix_ratio}")
        if self.max_new_tokens < 1 or (self.max_prompt_tokens is not None and self.max_prompt_tokens < 1):
            raise ValueError(f"token limits must be >= 1: {self}")

    @classmethod
    def from_config(cls, spec: dict) -> Task:
        return cls(**spec)

    def template_text(self) -> str:
        return load_template(self.template)


def target(suffix: str, ratio: float, min_words: int = 1) -> str:
    """What a rollout must reconstruct: the suffix without the words given as the answer's start."""
    return split_assistant_prefix(suffix, ratio, min_words)[1]


def candidate_prompt(tokenizer, template: str, prefix: str, suffix: str, *, prompt_format: str, ratio: float,
                     min_words: int = 1) -> str:
    """One candidate's full prompt (template, prefix, given suffix words), as the rollout engine builds it."""
    return prompt_text(tokenizer, template, prefix, suffix, prompt_format=prompt_format, assistant_prefix_ratio=ratio,
                       assistant_prefix_min_words=min_words)


def fit_prefix(tokenizer, template: str, prefix: str, suffix: str, *, prompt_format: str, ratio: float,
               max_tokens: int | None, min_words: int = 1) -> str:
    """``prefix`` without as few leading words as needed for the prompt to have at most ``max_tokens`` tokens.

    Fails when even an empty prefix does not fit (template and given words alone are too long).
    """
    def n_tokens(words: list[str]) -> int:
        text = candidate_prompt(tokenizer, template, " ".join(words), suffix, prompt_format=prompt_format,
                                ratio=ratio, min_words=min_words)
        return len(prompt_token_ids(tokenizer, text, prompt_format))

    words = prefix.split(" ")
    if max_tokens is None or n_tokens(words) <= max_tokens:
        return prefix
    lo, hi = 0, len(words)  # keep the last `lo` words: fits; the last `hi` words: does not
    if n_tokens([]) > max_tokens:
        raise ValueError(f"prompt does not fit {max_tokens} tokens even without prefix words "
                         "(template and given suffix words are too long)")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if n_tokens(words[len(words) - mid:]) <= max_tokens else (lo, mid)
    return " ".join(words[len(words) - lo:])


def fitted_split(split: pd.DataFrame, tokenizer, task: Task, *, prompt_format: str) -> pd.DataFrame:
    """``split`` with every prefix cut (:func:`fit_prefix`) so its prompt fits ``task.max_prompt_tokens``."""
    template = task.template_text()
    out = split.copy()
    out["prefix"] = [fit_prefix(tokenizer, template, p, s, prompt_format=prompt_format,
                                ratio=task.assistant_prefix_ratio,
                                max_tokens=task.max_prompt_tokens, min_words=task.assistant_prefix_min_words)
                     for p, s in zip(split["prefix"], split["suffix"])]
    return out


def prompts(split: pd.DataFrame, tokenizer, task: Task, *, prompt_format: str) -> list[str]:
    """The prompt of every candidate of a (fitted) split, in row order."""
    template = task.template_text()
    return [candidate_prompt(tokenizer, template, p, s, prompt_format=prompt_format, ratio=task.assistant_prefix_ratio,
                             min_words=task.assistant_prefix_min_words)
            for p, s in zip(split["prefix"], split["suffix"])]


def trainer_prompt(tokenizer, text: str, prompt_format: str) -> str:
    """The prompt string that a trainer turns into the engine's ids (:func:`prompt_token_ids`).

    ``verl``: the text as it is (the trainer tokenizes it without special tokens, as verl:
    ``GRPOSettings.prompt_special_tokens``). Else the engine adds BOS only when the rendered prompt does not
    already start with it; a trainer always lets the tokenizer add it, so a leading BOS in the text is removed
    when the tokenizer adds one itself (else it would appear twice).
    """
    bos = tokenizer.bos_token
    if (prompt_format != "verl" and bos and text.startswith(bos)
            and tokenizer("")["input_ids"][:1] == [tokenizer.bos_token_id]):
        return text[len(bos):]
    return text


def rollout_seed(base: int, seed: int) -> int:
    """Sampling seed of evaluation seed ``seed``: independent streams for every (base, seed)."""
    return int(np.random.SeedSequence([int(base), int(seed)]).generate_state(1)[0] % (2**31 - 1))
