"""Prefix rules: how a candidate text is cut into what an attack is given and what it must reconstruct."""

from __future__ import annotations

import math

#: How :func:`split_words` turns ``ratio * n_words`` into the prefix's word count (config
#: ``datasets.<d>.pool.prefix_rounding``): ``floor`` as the released ADRA code (``max(1, int(n * ratio))``,
#: its ``*_custom_mia.py``), ``ceil`` the rule used before it.
PREFIX_ROUNDINGS = {"floor": lambda x: max(1, math.floor(x)), "ceil": math.ceil}


def split_words(text: str, ratio: float, *, rounding: str) -> tuple[str, str]:
    """Cut ``text`` after ``rounding(ratio * n_words)`` whitespace-separated words (:data:`PREFIX_ROUNDINGS`).

    Pretraining-style benchmarks use ratio 0.5. A text of two or more words keeps at least one word
    in the prefix and one in the suffix, so there is always something to reconstruct (the code
    leaves the suffix empty at ratio 1); under ``floor`` a one-word text is all prefix, as in the code.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"prefix ratio must be in [0, 1], got {ratio}")
    if rounding not in PREFIX_ROUNDINGS:
        raise ValueError(f"unknown prefix rounding {rounding!r}; known: {', '.join(PREFIX_ROUNDINGS)}")
    words = text.split()
    if not words:
        return "", ""
    k = PREFIX_ROUNDINGS[rounding](ratio * len(words))
    if len(words) >= 2:
        k = min(max(k, 1), len(words) - 1)
    return " ".join(words[:k]), " ".join(words[k:])


def truncate_words(text: str, max_words: int | None) -> str:
    """Keep the first ``max_words`` whitespace-separated words (all of them when ``None``)."""
    if max_words is None:
        return text
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])


def split_assistant_prefix(text: str, ratio: float, min_words: int = 1) -> tuple[str, str]:
    """Cut ``text`` after its first ``max(min_words, floor(ratio * n_words))`` whitespace words: (given, rest).

    ``ratio`` 0 gives nothing; ``min_words`` 1 is the released ADRA code's rule, 0 plain ``floor``. At
    least one word stays in ``rest`` (the code would give a one-word text whole).
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"assistant-prefix ratio must be in [0, 1], got {ratio}")
    words = text.split()
    k = max(min(max(min_words, math.floor(ratio * len(words))), len(words) - 1), 0) if ratio > 0 else 0
    return " ".join(words[:k]), " ".join(words[k:])
