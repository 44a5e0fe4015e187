"""Word tokenisation shared by every reconstruction metric and reward.

Rule (the ADRA reference implementation's), applied in this order:

1. lowercase the whole text (``str.lower``);
2. split on Unicode whitespace (``str.split``);
3. split every run of characters from a script written without spaces (CJK ideographs,
   Hiragana, Katakana, Hangul, Thai, Lao, Khmer, Myanmar; see ``NO_SPACE_RANGES``) into single
   characters, so ``"hello世界"`` gives ``hello``, ``世``, ``界``;
4. strip the punctuation ``.,;:!?`` from both edges of every piece (inner punctuation stays:
   ``"e.g."`` gives ``e.g``, ``"3.14"`` stays ``3.14``);
5. drop pieces that became empty (a lone ``"..."``).

Other punctuation (quotes, brackets, dashes, CJK full stops ``。``) is kept as part of a token.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import chain, repeat

import numpy as np

PUNCTUATION = ".,;:!?"

# Unicode blocks of scripts written without spaces between words.
NO_SPACE_RANGES = (
    "\u0e00-\u0e7f"  # Thai
    "\u0e80-\u0eff"  # Lao
    "\u1000-\u109f"  # Myanmar
    "\u1100-\u11ff"  # Hangul Jamo
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul Compatibility Jamo
    "\u31f0-\u31ff"  # Katakana Phonetic Extensions
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uac00-\ud7af"  # Hangul Syllables
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\uff66-\uff9f"  # Halfwidth Katakana
    "\U00020000-\U0003134f"  # CJK Unified Ideographs Extensions B-G
)

_NO_SPACE_CHAR = re.compile(f"[{NO_SPACE_RANGES}]")
_PIECE = re.compile(f"[{NO_SPACE_RANGES}]|[^{NO_SPACE_RANGES}]+")


def tokenize_words(words: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Apply steps 1 and 3-5 of the rule to whitespace-free words, one word at a time.

    Returns the tokens of all words, concatenated, and how many tokens each word gave (0 when it
    was only punctuation, more than 1 for scripts without spaces). Lowercasing before or after
    the whitespace split gives the same words, so this is the rule for pre-split text; the fast
    kernel applies it once per distinct word of a batch instead of once per occurrence.
    """
    low = list(map(str.lower, words))
    tokens = list(map(str.strip, low, repeat(PUNCTUATION)))
    counts = np.fromiter(map(bool, tokens), dtype=np.int64, count=len(tokens))
    joined = "".join(low)
    if joined.isascii() or _NO_SPACE_CHAR.search(joined) is None:
        return list(filter(None, tokens)), counts
    # Split only the words that hold characters of scripts without spaces (found in the joined text).
    ends = np.cumsum(np.fromiter(map(len, low), dtype=np.int64, count=len(low)))
    hits = np.searchsorted(ends, [m.start() for m in _NO_SPACE_CHAR.finditer(joined)], side="right")
    parts, done = [], 0
    for i in np.unique(hits).tolist():
        pieces = list(filter(None, map(str.strip, _PIECE.findall(low[i]), repeat(PUNCTUATION))))
        parts += [tokens[done:i], pieces]
        counts[i], done = len(pieces), i + 1
    parts.append(tokens[done:])
    return list(filter(None, chain.from_iterable(parts))), counts


def word_tokens(text: str) -> list[str]:
    """Split ``text`` into the word tokens every lexical metric counts (rule in the module doc)."""
    return tokenize_words(text.split())[0]
