"""Paraphrastic variants of blanked questions that keep every ``[BLANK]``.

Backends:

- ``wordnet`` (offline default): each variant rewrites non-blank words with WordNet synonyms
  (:mod:`mialab.text.wordnet`); math spans, LaTeX commands, blanks, stop words and inflected
  forms are never touched. Each eligible word is replaced with probability ``rate`` (at least one
  per variant when the text has any eligible word; a text with none yields copies of itself).
  RSI needs variants that differ, so the default favours variety (``min_count=0``: any synonym
  of the chosen sense) over polish (``min_count=1`` keeps synonyms attested in SemCor). On 200
  blanked AIME problems, 5 variants were all distinct for 119 and all identical for 21 (9 had
  no rewritable word); identical variants give a raw variability of 0, which reads as rigid, so
  prefer the ``llm`` backend for real runs.
- ``llm``: an instruction model writes a text's variants in one call, a JSON array of ``n_variants``
  paraphrases, as the LaRA code asks for them (``resources/prompts/lara/paraphrase.txt``: its default
  path, ``generate_incomplete_variants_batch``); items that change the number of blanks, copy the text
  or repeat another are rejected and the text is asked again, from a fresh seed.

Every variant returned by :func:`paraphrase_variants` keeps exactly the source's blank count.
"""

from __future__ import annotations

import re
import zlib
from typing import Callable

import numpy as np

from mialab.core.registry import Registry
from mialab.lara.blanking import count_blanks
from mialab.text.llm_prompts import Generate, collect_items, load_template, normalise_text, parse_list
from mialab.text.spans import BLANK, MATH_SPAN
from mialab.text.wordnet import DEBIAN_WORDNET, synonyms

ParaphraseBackend = Registry("blanked-question paraphrase backend")

PROTECTED = re.compile(rf"{re.escape(BLANK)}|{MATH_SPAN.pattern}|\\[A-Za-z]+", re.DOTALL)
WORD = re.compile(r"(?<![\w\\])[A-Za-z]+(?![\w])")


def substitution_slots(text: str, min_count: int = 0,
                       source: str = DEBIAN_WORDNET) -> list[tuple[int, int, tuple[str, ...]]]:
    """``(start, end, synonyms)`` for each rewritable word outside blanks and math."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    protected = [m.span() for m in PROTECTED.finditer(text)]
    slots = []
    for m in WORD.finditer(text):
        s, e = m.span()
        word = m.group()
        if any(a < e and s < b for a, b in protected) or len(word) < 3 or word.lower() in ENGLISH_STOP_WORDS:
            continue
        if not (word.islower() or (word[0].isupper() and word[1:].islower())):
            continue
        syns = synonyms(word.lower(), min_count, source)
        if syns:
            slots.append((s, e, syns))
    return slots


def _match_case(template: str, word: str) -> str:
    return word[0].upper() + word[1:] if template[0].isupper() else word


@ParaphraseBackend.register("wordnet")
def wordnet_variants(texts: list[str], n_variants: int, *, rate: float = 0.5, seed: int = 0, min_count: int = 0,
                     source: str = DEBIAN_WORDNET) -> list[list[str]]:
    """Synonym-substitution variants, seeded by (seed, text, variant index)."""
    out = []
    for text in texts:
        slots = substitution_slots(text, min_count, source)
        variants = []
        for j in range(n_variants):
            rng = np.random.default_rng([seed, zlib.crc32(text.encode()), j])
            chosen = rng.random(len(slots)) < rate
            if slots and not chosen.any():
                chosen[rng.integers(len(slots))] = True
            pieces, pos = [], 0
            for (s, e, syns), pick in zip(slots, chosen):
                if pick:
                    pieces += [text[pos:s], _match_case(text[s:e], syns[rng.integers(len(syns))])]
                    pos = e
            variants.append("".join(pieces + [text[pos:]]))
        out.append(variants)
    return out


@ParaphraseBackend.register("llm")
def llm_variants(texts: list[str], n_variants: int, *, generate: Generate, template: str = "paraphrase",
                 edit_template: str = "paraphrase_edit", max_attempts: int = 3,
                 fallback: Callable[..., list[list[str]]] | None = None) -> list[list[str]]:
    """LLM paraphrases as the LaRA code's default path asks for them (``make_incomplete_questions_rsi.py``,
    ``generate_incomplete_variants_batch`` / ``generate_question_variants_batch``): one call per text for a JSON
    array of ``n_variants`` paraphrases (``template`` for a blanked text, ``edit_template`` for an edited one
    without ``[BLANK]``), so a text's variants are written side by side, never as one prompt sent again and
    again. An item with another blank count, equal to the source or to another variant is rejected; a text
    short of ``n_variants`` is asked again (a fresh sample). Still short after ``max_attempts``: the text's
    variants of ``fallback(texts, n_variants)`` (e.g. :func:`wordnet_variants`), else an error."""
    tpls = {True: load_template(template), False: load_template(edit_template)}
    prompts = [tpls[count_blanks(t) > 0].format(question=t, n=n_variants) for t in texts]

    def accept(i: int, out: str) -> list[str]:
        source = texts[i]
        return [x for x in parse_list(out)
                if count_blanks(x) == count_blanks(source) and normalise_text(x) != normalise_text(source)]

    rest = None if fallback is None else (lambda short: fallback([texts[i] for i in short], n_variants))
    return collect_items(prompts, generate, accept, n_variants, max_attempts=max_attempts, what="llm paraphrase",
                         fallback=rest)


def paraphrase_variants(texts: list[str], n_variants: int, backend: str | Callable[..., list[list[str]]] = "wordnet",
                        **options) -> list[list[str]]:
    """``n_variants`` paraphrases per blanked text; each must keep exactly its blank count.

    ``backend`` is a registered name or any paraphrase callable ``(texts, n_variants, **options)
    -> variants``.
    """
    name = getattr(backend, "__name__", backend)
    out = ParaphraseBackend.resolve(backend)(list(texts), n_variants, **options)
    for text, variants in zip(texts, out, strict=True):
        if len(variants) != n_variants:
            raise ValueError(f"{name}: {len(variants)} variants instead of {n_variants} for {text[:80]!r}")
        bad = [v for v in variants if count_blanks(v) != count_blanks(text)]
        if bad:
            raise ValueError(f"{name}: a variant changed the number of {BLANK}s "
                             f"({count_blanks(text)} -> {count_blanks(bad[0])}): {bad[0][:80]!r}")
    return out
