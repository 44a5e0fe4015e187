"""BlankImportant: replace a question's key information spans by ``[BLANK]``, keeping the rest.

Backends (the same backend and parameters are applied to a question and to its neighbours):

- ``numbers_entities``: regex spans: LaTeX math, numbers and number words, capitalised entity
  words (offline). A text without any such span is an error (use ``token_loss`` or ``llm``).
- ``token_loss``: the highest-surprisal words under a causal LM (its per-token losses summed per
  word), a fraction of the words.
- ``llm``: an instruction model blanks exactly ``num_blanks`` important spans (the LaRA code's
  prompt, ``resources/prompts/lara/blank.txt``).

The code's other perturbation strategies edit the question instead (no ``[BLANK]``):
``num_replace`` (one number changed, offline), ``var_rename`` and ``distractor`` (an instruction
model renames one variable / inserts one distractor sentence, the code's prompts).
"""

from __future__ import annotations

import math
import random
import re
import zlib
from typing import Callable

import numpy as np

from mialab.core.registry import Registry
from mialab.text.llm_prompts import Generate, collect_items, load_template, normalise_text, parse_list
from mialab.text.spans import BLANK, MATH_SPAN

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


def word_surprisals(model, tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Per word of :func:`word_spans`: the sum of its tokens' losses ``-log p(token | prefix)``.

    A token counts for every word its characters overlap; a token with no prediction (the
    first one when the tokenizer adds no BOS) contributes nothing.
    """
    from mialab.lm.logprobs import token_logprobs

    enc = tokenizer(texts, return_offsets_mapping=True)
    logps = token_logprobs(model, enc["input_ids"])
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
def blank_token_loss(texts: list[str], *, model_path: str, fraction: float = 0.2, device: str = "auto",
                     dtype: str = "float32") -> list[str]:
    """Blank the ``ceil(fraction * n_words)`` (at least one) highest-surprisal words of each text."""
    from mialab.lm.loading import load_lm

    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    model, tok = load_lm(model_path, device=device, dtype=dtype)
    out = []
    for text, surprisal in zip(texts, word_surprisals(model, tok, texts)):
        spans = word_spans(text)
        if not spans:
            raise ValueError(f"nothing to blank in an empty text: {text!r}")
        top = np.argsort(-surprisal, kind="stable")[:max(1, math.ceil(fraction * len(spans)))]
        out.append(replace_spans(text, [spans[i] for i in top]))
    return out


@BlankBackend.register("llm")
def blank_llm(texts: list[str], *, generate: Generate, template: str = "blank", num_blanks: int = 1,
              max_attempts: int = 3, fallback: Callable[[list[str]], list[str]] | None = None,
              drop_invalid: bool = False) -> list[str | None]:
    """An instruction model blanks the ``num_blanks`` most important spans (the LaRA code's
    ``important`` strategy and prompt, non-numeric keywords preferred); a completion with another
    number of ``[BLANK]`` is rejected and asked for again. ``num_blanks`` is the code's blank-count
    sweep (``--rep_stiff_incomplete_num_blanks``; its degenerate 0, no blank at all, is not offered).
    A text still invalid after ``max_attempts``: ``fallback(texts)`` blanks it (e.g. :func:`blank_token_loss`),
    else None with ``drop_invalid`` (the caller drops it, :func:`mialab.lara.construction.build_perturbations`),
    else an error."""
    if num_blanks < 1:
        raise ValueError(f"lara.blank.num_blanks must be at least 1, got {num_blanks}")
    tpl = load_template(template)
    prompts = [tpl.format(question=t, num_blanks=num_blanks) for t in texts]

    def accept(i: int, out: str) -> list[str]:
        return [x for x in (parse_list(out)[:1] or [out.strip()]) if count_blanks(x) == num_blanks]

    rest = (None if fallback is None else (lambda short: [[x] for x in fallback([texts[i] for i in short])]))
    return _first_items(prompts, generate, accept, max_attempts, "llm blanking", rest, drop_invalid)


def _first_items(prompts: list[str], generate: Generate, accept, max_attempts: int, what: str, fallback,
                 drop_invalid: bool) -> list[str | None]:
    """Each prompt's first accepted item (:func:`collect_items`); with ``drop_invalid`` and no ``fallback``, None
    where the attempts found none."""
    if fallback is None and drop_invalid:
        fallback = lambda short: [[] for _ in short]  # noqa: E731
    return [got[0] if got else None for got in collect_items(prompts, generate, accept, 1, max_attempts=max_attempts,
                                                             what=what, fallback=fallback)]


EDIT_NUMBER = re.compile(r"(?<!\w)-?\d+(?:\.\d+)?(?!\w)")


def replace_one_number(text: str, rng: random.Random) -> str:
    """The LaRA code's ``_perturb_replace_single_number``: one numeric literal (other than 0, 1, -1
    when there is one) moved to a different value; a text without a number is returned as is."""
    matches = list(EDIT_NUMBER.finditer(text))
    if not matches:
        return text
    m = rng.choice([x for x in matches if x.group() not in ("0", "1", "-1")] or matches)
    old = m.group()
    if "." in old:
        value = float(old)
        new_value = value + rng.uniform(0.5, 2.5) * rng.choice([-1.0, 1.0])
        new = f"{new_value if abs(new_value - value) >= 1e-9 else value + 1.0:.6g}"
    else:
        value = int(old)
        delta = rng.randint(1, max(2, abs(value) // 5 + 1))
        new = str(value + (delta if rng.random() < 0.5 else -delta))
    return text[:m.start()] + new + text[m.end():]


@BlankBackend.register("num_replace")
def edit_num_replace(texts: list[str], *, seed: int = 0) -> list[str]:
    """The code's ``num_replace`` perturbation (no ``[BLANK]``): one number changed, seeded per text
    (the code seeds with Python's per-process ``hash``; here ``crc32`` of the text, reproducible)."""
    return [replace_one_number(t, random.Random(zlib.crc32(t.encode()) ^ seed)) for t in texts]


def _llm_edit(texts: list[str], generate: Generate, template: str, what: str, max_attempts: int,
              drop_invalid: bool) -> list[str | None]:
    tpl = load_template(template)

    def accept(i: int, out: str) -> list[str]:
        return [x for x in (parse_list(out)[:1] or [out.strip()])
                if BLANK not in x and normalise_text(x) != normalise_text(texts[i])]

    return _first_items([tpl.format(question=t) for t in texts], generate, accept, max_attempts, what, None,
                        drop_invalid)


@BlankBackend.register("var_rename")
def edit_var_rename(texts: list[str], *, generate: Generate, template: str = "var_rename",
                    max_attempts: int = 3, drop_invalid: bool = False) -> list[str | None]:
    """The code's ``var_rename``: an instruction model renames one single-letter variable to a noun
    (``drop_invalid``: as :func:`blank_llm`'s)."""
    return _llm_edit(texts, generate, template, "llm var_rename", max_attempts, drop_invalid)


@BlankBackend.register("distractor")
def edit_distractor(texts: list[str], *, generate: Generate, template: str = "distractor",
                    max_attempts: int = 3, drop_invalid: bool = False) -> list[str | None]:
    """The code's ``distractor``: an instruction model inserts one irrelevant, plausible sentence
    (``drop_invalid``: as :func:`blank_llm`'s)."""
    return _llm_edit(texts, generate, template, "llm distractor", max_attempts, drop_invalid)


#: perturbations that edit the question instead of blanking it (the code's alternative strategies)
EDIT_BACKENDS = ("num_replace", "var_rename", "distractor")
#: perturbation backends that need an instruction model
LLM_BACKENDS = ("llm", "var_rename", "distractor")


def is_perturbed(original: str, perturbed: str, backend) -> bool:
    """A blanking backend left a ``[BLANK]``; an editing one (:data:`EDIT_BACKENDS`) changed the text."""
    return perturbed != original if backend in EDIT_BACKENDS else count_blanks(perturbed) > 0


def blank_important(texts: list[str], backend: str | Callable[..., list[str]] = "numbers_entities",
                    **options) -> list[str | None]:
    """BlankImportant (or one of the :data:`EDIT_BACKENDS`) for every text with one backend (a registered
    name, or any callable ``(texts, **options) -> texts``); a text left unperturbed is an error. An LLM
    backend given ``drop_invalid`` returns None for a text still invalid after its attempts."""
    out = BlankBackend.resolve(backend)(list(texts), **options)
    bare = [t for t, b in zip(texts, out, strict=True) if b is not None and not is_perturbed(t, b, backend)]
    if bare:
        name = getattr(backend, "__name__", backend)
        raise ValueError(f"{name}: {len(bare)} text(s) have nothing to blank or edit, e.g. {bare[0][:80]!r}; "
                         "use the token_loss or llm backend for such texts")
    return out
