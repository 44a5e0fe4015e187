"""BlankImportant: replace a question's key information spans by ``[BLANK]``, keeping the rest.

Backends (the same backend and parameters are applied to a question and to its neighbours):

- ``numbers_entities``: regex spans: LaTeX math, numbers and number words, capitalised entity
  words (offline). A text without any such span is an error (use ``token_loss`` or ``llm``).
- ``token_loss``: the highest-surprisal words under a causal LM (its per-token losses summed per
  word), a fraction of the words.
- ``llm``: an instruction model rewrites the question from ``resources/prompts/lara/blank.txt``.
"""

from __future__ import annotations

import math
import re
from typing import Callable

import numpy as np

from mialab.lara.llm import Generate, collect_items, load_template
from mialab.registry import Registry

BLANK = "[BLANK]"

MATH_SPAN = re.compile(r"\$\$.+?\$\$|\$.+?\$|\\\(.+?\\\)|\\\[.+?\\\]", re.DOTALL)
# A number not glued to a preceding letter (so x2 and a_1 stay): 12, 3.5, 1,000, 3/4.
NUMBER = re.compile(r"(?<![A-Za-z_\d])\d+(?:[.,]\d+)*(?:/\d+)?")
_CARDINALS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
              "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
              "hundred thousand million billion")
_ORDINALS = ("first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth twentieth "
             "hundredth thousandth")
NUMBER_WORD = re.compile(r"\b(?:" + "|".join((_CARDINALS + " " + _ORDINALS + " half twice thrice dozen").split())
                         + r")\b", re.IGNORECASE)
# Runs of capitalised words; the first word of a sentence is not an entity by capitalisation.
CAPITALISED_RUN = re.compile(r"\b[A-Z][\w'\u2019-]*(?:[ \t]+[A-Z][\w'\u2019-]*)*")
SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)$")
_TRIM = ".,;:!?\"'()"

BlankBackend = Registry("blank backend")


def count_blanks(text: str) -> int:
    """Number of ``[BLANK]`` tokens in ``text``."""
    return text.count(BLANK)


def replace_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """Replace each span (overlapping ones merged) by one ``[BLANK]``; other characters stay."""
    merged: list[list[int]] = []
    for s, e in sorted(spans):
        if merged and s < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    out, pos = [], 0
    for s, e in merged:
        out += [text[pos:s], BLANK]
        pos = e
    return "".join(out + [text[pos:]])


def entity_spans(text: str) -> list[tuple[int, int]]:
    """Capitalised word runs, minus a sentence-initial first word and the pronoun "I"."""
    spans = []
    for m in CAPITALISED_RUN.finditer(text):
        s, e = m.span()
        if SENTENCE_START.search(text[:s]):
            nxt = re.search(r"[ \t]+", text[s:e])
            if nxt is None:
                continue
            s += nxt.end()
        if text[s:e] != "I":
            spans.append((s, e))
    return spans


def important_spans(text: str) -> list[tuple[int, int]]:
    """Spans the ``numbers_entities`` backend blanks: math, numbers (digits or words), entities."""
    patterns = (MATH_SPAN, NUMBER, NUMBER_WORD)
    return [m.span() for pattern in patterns for m in pattern.finditer(text)] + entity_spans(text)


@BlankBackend.register("numbers_entities")
def blank_numbers_entities(texts: list[str]) -> list[str]:
    """Blank math spans, numbers (digits, number words) and capitalised entities (regex; offline)."""
    return [replace_spans(t, important_spans(t)) for t in texts]


def word_spans(text: str) -> list[tuple[int, int]]:
    """The blanking units: each LaTeX math span whole, and the whitespace-separated words
    outside them with surrounding punctuation trimmed."""
    maths = [m.span() for m in MATH_SPAN.finditer(text)]
    spans = list(maths)
    for m in re.finditer(r"\S+", text):
        s, e = m.span()
        if any(a < e and s < b for a, b in maths):
            continue
        while s < e and text[s] in _TRIM:
            s += 1
        while e > s and text[e - 1] in _TRIM:
            e -= 1
        if s < e:
            spans.append((s, e))
    return sorted(spans)


def word_surprisals(model, tokenizer, texts: list[str], *, batch_size: int = 8) -> list[np.ndarray]:
    """Per word of :func:`word_spans`: the sum of its tokens' losses ``-log p(token | prefix)``.

    A token counts for every word its characters overlap; a token with no prediction (the
    first one when the tokenizer adds no BOS) contributes nothing.
    """
    from mialab.lara.lm import token_logprobs

    enc = tokenizer(texts, return_offsets_mapping=True)
    logps = token_logprobs(model, enc["input_ids"], pad_token_id=tokenizer.pad_token_id, batch_size=batch_size)
    out = []
    for text, offsets, logp in zip(texts, enc["offset_mapping"], logps):
        spans = word_spans(text)
        surprisal = np.zeros(len(spans))
        for (a, b), lp in zip(offsets[1:], logp):
            for w, (s, e) in enumerate(spans):
                if a < e and b > s:
                    surprisal[w] -= lp
        out.append(surprisal)
    return out


@BlankBackend.register("token_loss")
def blank_token_loss(texts: list[str], *, model_path: str, fraction: float = 0.2, batch_size: int = 8,
                     device: str = "auto", dtype: str = "float32") -> list[str]:
    """Blank the ``ceil(fraction * n_words)`` (at least one) highest-surprisal words of each text."""
    from mialab.lara.lm import load_lm

    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    model, tok = load_lm(model_path, device=device, dtype=dtype)
    out = []
    for text, surprisal in zip(texts, word_surprisals(model, tok, texts, batch_size=batch_size)):
        spans = word_spans(text)
        if not spans:
            raise ValueError(f"nothing to blank in an empty text: {text!r}")
        top = np.argsort(-surprisal, kind="stable")[:max(1, math.ceil(fraction * len(spans)))]
        out.append(replace_spans(text, [spans[i] for i in top]))
    return out


@BlankBackend.register("llm")
def blank_llm(texts: list[str], *, generate: Generate, template: str = "blank", max_attempts: int = 3) -> list[str]:
    """An instruction model blanks the key spans; a completion without ``[BLANK]`` is rejected."""
    tpl = load_template(template)
    prompts = [tpl.format(question=t) for t in texts]

    def accept(i: int, out: str) -> list[str]:
        text = out.strip()
        return [text] if count_blanks(text) > 0 else []

    return [got[0] for got in collect_items(prompts, generate, accept, 1, max_attempts=max_attempts,
                                            what="llm blanking")]


def blank_important(texts: list[str], backend: str | Callable[..., list[str]] = "numbers_entities",
                    **options) -> list[str]:
    """BlankImportant for every text with one backend (a registered name, or any callable
    ``(texts, **options) -> texts``); a text left without a blank is an error."""
    out = BlankBackend.resolve(backend)(list(texts), **options)
    bare = [t for t, b in zip(texts, out, strict=True) if count_blanks(b) == 0]
    if bare:
        name = getattr(backend, "__name__", backend)
        raise ValueError(f"{name}: {len(bare)} text(s) have nothing to blank, e.g. {bare[0][:80]!r}; "
                         "use the token_loss or llm backend for such texts")
    return out
