"""Prefix rules: how a candidate text is cut into what an attack is given and what it must reconstruct."""

from __future__ import annotations

import math


def split_words(text: str, ratio: float) -> tuple[str, str]:
    """Cut ``text`` after ``ceil(ratio * n_words)`` whitespace-separated words.

    Pretraining-style benchmarks use ratio 0.5. At least one word stays in the suffix whenever the
    text has two or more words, so there is always something to reconstruct.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"prefix ratio must be in [0, 1], got {ratio}")
    words = text.split()
    if not words:
        return "", ""
    k = math.ceil(ratio * len(words))
    if len(words) >= 2:
        k = min(max(k, 1), len(words) - 1)
    return " ".join(words[:k]), " ".join(words[k:])


def truncate_words(text: str, max_words: int | None) -> str:
    """Keep the first ``max_words`` whitespace-separated words (all of them when ``None``)."""
    if max_words is None:
        return text
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])


def split_assistant_prefix(text: str, ratio: float) -> tuple[str, str]:
    """Cut ``text`` after its first ``floor(ratio * n_words)`` whitespace words: (given, rest)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"assistant-prefix ratio must be in [0, 1], got {ratio}")
    words = text.split()
    k = math.floor(ratio * len(words))
    return " ".join(words[:k]), " ".join(words[k:])
