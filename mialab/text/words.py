"""Word tokenisation shared by every reconstruction metric and reward.

Rule (the released ADRA code's reward tokeniser, ``verl/utils/reward_score/lexical.py``), in order:

1. lowercase the whole text (``str.lower``);
2. split on Unicode whitespace (``str.split``);
3. split every run of characters from a script written without spaces (the code's list, see
   ``NO_SPACE_RANGES``: CJK ideographs, Kana, Hangul, Thai, Lao, Khmer, Myanmar, Tibetan,
   Javanese, Balinese, Batak, Kayah Li, Mongolian) into single characters, so ``"hello世界"``
   gives ``hello``, ``世``, ``界``; ``split_scripts=False`` skips this step (the code's
   *evaluation* tokeniser, ``reconstruction_evaluation.py``, splits on whitespace only);
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

# Unicode blocks of scripts written without spaces between words: exactly the released code's list
# (its gaps included, e.g. U+2A6E0-U+2A6FF and the CJK Compatibility Ideographs Supplement stay words).
NO_SPACE_RANGES = (
    "\u0e00-\u0e7f"  # Thai
    "\u0e80-\u0eff"  # Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1100-\u11ff"  # Hangul Jamo
    "\u1780-\u17ff"  # Khmer
    "\u1800-\u18af"  # Mongolian
    "\u19e0-\u19ff"  # Khmer Symbols
    "\u1b00-\u1b7f"  # Balinese
    "\u1bc0-\u1bff"  # Batak
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul Compatibility Jamo
    "\u31f0-\u31ff"  # Katakana Phonetic Extensions
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\ua900-\ua92f"  # Kayah Li
    "\ua960-\ua97f"  # Hangul Jamo Extended-A
    "\ua980-\ua9df"  # Javanese
    "\ua9e0-\ua9ff"  # Myanmar Extended-B
    "\uaa60-\uaa7f"  # Myanmar Extended-A
    "\uac00-\ud7af"  # Hangul Syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo Extended-B
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\uff65-\uff9f"  # Halfwidth Katakana
    "\U00020000-\U0002a6df"  # CJK Unified Ideographs Extension B
    "\U0002a700-\U0002ebef"  # CJK Unified Ideographs Extensions C-F
    "\U00030000-\U0003134f"  # CJK Unified Ideographs Extension G
)

_NO_SPACE_CHAR = re.compile(f"[{NO_SPACE_RANGES}]")
_PIECE = re.compile(f"[{NO_SPACE_RANGES}]|[^{NO_SPACE_RANGES}]+")


def tokenize_words(words: Sequence[str], split_scripts: bool = True) -> tuple[list[str], np.ndarray]:
    """Apply steps 1 and 3-5 of the rule (step 3 only with ``split_scripts``) to whitespace-free words.

    Returns the tokens of all words, concatenated, and how many tokens each word gave (0 when it
    was only punctuation, more than 1 for scripts without spaces). Lowercasing before or after
    the whitespace split gives the same words, so this is the rule for pre-split text; the fast
    kernel applies it once per distinct word of a batch instead of once per occurrence.
    """
    low = list(map(str.lower, words))
    tokens = list(map(str.strip, low, repeat(PUNCTUATION)))
    counts = np.fromiter(map(bool, tokens), dtype=np.int64, count=len(tokens))
    joined = "".join(low)
    if not split_scripts or joined.isascii() or _NO_SPACE_CHAR.search(joined) is None:
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


def word_tokens(text: str, split_scripts: bool = True) -> list[str]:
    """Split ``text`` into the word tokens every lexical metric counts (rule in the module doc)."""
    return tokenize_words(text.split(), split_scripts)[0]
