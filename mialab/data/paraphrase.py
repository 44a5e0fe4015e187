"""Paraphrase engine for ADRA's paraphrased setting (appendix B): rewrite candidates, keep meaning.

A *paraphraser* maps a list of texts to as many rewritten texts, aligned by position. Backends,
by name (:func:`get_paraphraser`):

- ``offline`` (the tiny world; no model): seeded lexical and light syntactic rewriting.
  Synonyms come from WordNet 3.0 (Debian's ``wordnet-base``, read by NLTK through
  :mod:`mialab.text.wordnet`). A word is replaced only when the choice is safe: lower-case, not a
  stop word, not possibly an inflected form of another word ("found" may be "find"), all its
  senses in one part of speech ("study" is noun and verb: skipped), and replaced by the lemma of
  its most frequent sense that SemCor counts most often in that sense (at least ``min_count``).
  Syntactic rewrites: fixed equivalent phrasings ("for example" <-> "for instance", "do not" <->
  "don't", "in spite of" <-> "despite", ...) and swapped noun/adjective coordinations ("members and
  supporters" -> "supporters and members"). LaTeX/math spans, numbers and capitalised words
  (names) are never touched. Each eligible edit is applied with probability ``rate``, at least
  one per text that has any, seeded by ``(seed, text)`` so equal inputs give equal outputs.
- ``hf`` / ``vllm``: an instruction model on that backend of the rollout engine (:mod:`mialab.lm.engine`:
  transformers, or vLLM in its own venv), with the engine's checks: its options only the backend's
  (vLLM engine arguments an allow-list), and the model, named by path, never runs its folder's code.

The LLM backends fill a prompt template, ``resources/prompts/paraphrase/<name>.txt`` with an
``{input}`` field (ADRA Figure 3 uses the same placeholder): an explicit ``template`` name or
path, else the family's own file, else its kind (``math``, ``reasoning``, ``chat``), else
``default``. :func:`llm_paraphraser` wraps any ``generate(prompts) -> texts`` callable the same way.

:func:`paraphrase_split` rewrites a split's prefixes and suffixes (separately, so the boundary and
its ratio hold; identical segments, such as the shared problem of a paired S1 row, get identical
rewrites) and keeps ids, labels and order. :func:`paraphrase_setting` applies ADRA's semantics:
to evaluate an existing model, evaluate on paraphrases; for fine-tuning experiments, train on
paraphrases and evaluate on the originals; the returned manifest records each part's ``setting``.
"""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from mialab.core.paths import PROMPTS
from mialab.core.registry import Registry
from mialab.data.paraphrase_experiments import EXPERIMENTS
from mialab.data.schema import validate_split
from mialab.text.llm_prompts import Generate
from mialab.text.spans import MATH_SPAN
from mialab.text.wordnet import DEBIAN_WORDNET, load_wordnet

PROMPT_DIR = PROMPTS / "paraphrase"
TEMPLATE_KIND = {"aime": "math", "olympiad_math": "math", "lara_rl": "math", "s1": "reasoning",
                 "s1_1": "reasoning", "tulu3": "chat"}

Paraphrasers = Registry("split paraphrase backend")

# Equivalent phrasings, applied in the direction given (both directions are listed when safe).
PHRASES: tuple[tuple[str, str], ...] = (
    ("for example", "for instance"), ("for instance", "for example"), ("therefore", "thus"),
    ("in spite of", "despite"), ("despite", "in spite of"), ("because of", "owing to"), ("owing to", "because of"),
    ("in order to", "to"), ("prior to", "before"), ("is able to", "can"), ("are able to", "can"),
    ("was able to", "could"), ("whether or not", "whether"), ("do not", "don't"), ("don't", "do not"),
    ("does not", "doesn't"), ("doesn't", "does not"), ("did not", "didn't"), ("didn't", "did not"),
    ("is not", "isn't"), ("isn't", "is not"), ("are not", "aren't"), ("aren't", "are not"),
    ("was not", "wasn't"), ("wasn't", "was not"), ("cannot", "can't"), ("can't", "cannot"),
    ("will not", "won't"), ("won't", "will not"), ("it is", "it's"),
)
_PHRASE = re.compile(r"(?<![\w'])(" + "|".join(re.escape(a) for a, _ in PHRASES) + r")(?![\w'])", re.IGNORECASE)
_PHRASE_TO = {a: b for a, b in PHRASES}
_WORD = re.compile(r"(?<![\w\\'-])[a-z]{3,}(?![\w'-])")
_COORDINATION = re.compile(r"(?<![\w\\'-])([a-z]{3,}) and ([a-z]{3,})(?![\w'-])")
# Never edited: math, LaTeX commands, inline code and URLs.
_PROTECTED = re.compile(rf"{MATH_SPAN.pattern}|\\[A-Za-z]+|`[^`]*`|https?://\S+", re.DOTALL)


@functools.lru_cache(maxsize=262144)
def sense_pos(word: str, source: str = DEBIAN_WORDNET) -> str | None:
    """The part of speech (n, v, a, r) shared by every WordNet sense of ``word`` or of its base
    forms (so "members" is a noun), None when its senses span several or it has none."""
    found = {"a" if s.pos() == "s" else s.pos() for s in load_wordnet(source).synsets(word)}
    return found.pop() if len(found) == 1 else None


@functools.lru_cache(maxsize=262144)
def common_synonym(word: str, min_count: int = 2, source: str = DEBIAN_WORDNET) -> str | None:
    """A safe one-word synonym of ``word``, or None.

    ``word`` must be a base form (no other lemma could have produced it: "found" may be "find")
    whose senses all share one part of speech. The sense is the one where ``word`` is most
    frequent in SemCor; the synonym is that sense's lemma with the highest SemCor count there,
    which must reach ``min_count`` (so rare or archaic words such as "twelvemonth" never appear).
    """
    wn = load_wordnet(source)
    # _morphy lists every base form (the public morphy returns only the first)
    if sense_pos(word, source) is None or any(b != word for pos in "nvar" for b in wn._morphy(word, pos)):
        return None
    own = [lemma for lemma in wn.lemmas(word) if lemma.name() == word]
    if not own:
        return None
    sense = max(own, key=lambda lemma: lemma.count()).synset()
    scored = [(-lemma.count(), lemma.name()) for lemma in sense.lemmas()
              if lemma.name() != word and len(lemma.name()) >= 3 and lemma.name().isalpha()
              and lemma.name().islower() and lemma.count() >= min_count]
    return min(scored)[1] if scored else None


def _match_case(original: str, new: str) -> str:
    return new[0].upper() + new[1:] if original[:1].isupper() else new


def candidate_edits(text: str, *, min_count: int = 2, source: str = DEBIAN_WORDNET) -> list[tuple[int, int, str]]:
    """Non-overlapping ``(start, end, replacement)`` edits for ``text``: phrases, coordination
    swaps, then synonyms, each outside protected spans and any earlier edit."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    taken = [m.span() for m in _PROTECTED.finditer(text)]
    edits: list[tuple[int, int, str]] = []

    def free(s: int, e: int) -> bool:
        return not any(a < e and s < b for a, b in taken)

    def add(s: int, e: int, new: str) -> None:
        edits.append((s, e, new))
        taken.append((s, e))

    for m in _PHRASE.finditer(text):
        if free(*m.span()):
            add(*m.span(), _match_case(m.group(), _PHRASE_TO[m.group().lower()]))
    for m in _COORDINATION.finditer(text):
        a, b = m.group(1), m.group(2)
        if a == b or {a, b} & ENGLISH_STOP_WORDS or not free(*m.span()):
            continue
        pos = sense_pos(a, source)
        if pos in ("n", "a") and sense_pos(b, source) == pos:
            add(*m.span(), f"{b} and {a}")
    for m in _WORD.finditer(text):
        if m.group() in ENGLISH_STOP_WORDS or not free(*m.span()):
            continue
        syn = common_synonym(m.group(), min_count, source)
        if syn is not None:
            add(*m.span(), syn)
    return sorted(edits)


def offline_rewrite(text: str, *, rate: float, seed: int, min_count: int = 2, source: str = DEBIAN_WORDNET) -> str:
    """Apply each candidate edit with probability ``rate`` (at least one), seeded by the text."""
    edits = candidate_edits(text, min_count=min_count, source=source)
    if not edits:
        return text
    rng = np.random.default_rng([seed, zlib.crc32(text.encode("utf-8"))])
    chosen = rng.random(len(edits)) < rate
    if not chosen.any():
        chosen[rng.integers(len(edits))] = True
    out = text
    for (s, e, new), pick in reversed(list(zip(edits, chosen))):
        if pick:
            out = out[:s] + new + out[e:]
    return out


@dataclass(frozen=True)
class Paraphraser:
    """A named paraphrase backend with its options; calling it checks alignment and emptiness."""

    backend: str
    options: dict
    rewrite: Callable[[list[str]], list[str]] = field(repr=False)

    def __call__(self, texts: list[str]) -> list[str]:
        texts = list(texts)
        out = [str(t).strip() for t in self.rewrite(texts)]
        if len(out) != len(texts):
            raise ValueError(f"{self.backend} paraphraser returned {len(out)} texts for {len(texts)} inputs")
        empty = [i for i, (src, new) in enumerate(zip(texts, out)) if src.strip() and not new]
        if empty:
            raise ValueError(f"{self.backend} paraphraser returned {len(empty)} empty text(s), e.g. input {empty[0]}")
        return out


@Paraphrasers.register("offline")
def offline_paraphraser(*, rate: float = 0.5, seed: int = 0, min_count: int = 2,
                        wordnet: str = DEBIAN_WORDNET) -> Paraphraser:
    """WordNet synonyms plus light syntactic rewrites (see the module docstring)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"offline paraphraser: rate must be in (0, 1], got {rate}")
    return Paraphraser("offline", {"rate": rate, "seed": seed, "min_count": min_count, "wordnet": wordnet},
                       lambda texts: [offline_rewrite(t, rate=rate, seed=seed, min_count=min_count, source=wordnet)
                                      for t in texts])


def load_paraphrase_template(*, family: str | None = None, template: str | None = None) -> str:
    """The prompt template: ``template`` (a name under the prompt folder or a file path), else the
    family's file, else its kind's, else ``default``; it must contain ``{input}``."""
    if template is not None:
        path = Path(template) if Path(template).is_file() else PROMPT_DIR / f"{template}.txt"
        if not path.is_file():
            known = sorted(p.stem for p in PROMPT_DIR.glob("*.txt"))
            raise FileNotFoundError(f"unknown paraphrase template {template!r}; known: {', '.join(known)}")
    else:
        names = [family, TEMPLATE_KIND.get(family or ""), "default"]
        path = next(PROMPT_DIR / f"{n}.txt" for n in names if n and (PROMPT_DIR / f"{n}.txt").is_file())
    text = path.read_text(encoding="utf-8")
    if "{input}" not in text:
        raise ValueError(f"paraphrase template {path} has no {{input}} field")
    return text


def llm_paraphraser(generate: Generate, *, family: str | None = None, template: str | None = None,
                    batch_size: int | None = 16, backend: str = "llm", options: dict | None = None) -> Paraphraser:
    """Paraphrase with any ``generate(prompts) -> completions`` callable, ``batch_size`` prompts a call
    (None: all in one call, the backend batches them)."""
    tpl = load_paraphrase_template(family=family, template=template)

    def rewrite(texts: list[str]) -> list[str]:
        prompts = [tpl.replace("{input}", t) for t in texts]
        out: list[str] = []
        size = batch_size or max(1, len(prompts))
        for start in range(0, len(prompts), size):
            batch = prompts[start:start + size]
            got = list(generate(batch))
            if len(got) != len(batch):
                raise ValueError(f"generate returned {len(got)} completions for {len(batch)} prompts")
            out.extend(got)
        return out

    return Paraphraser(backend, {"family": family, "template": template, "batch_size": batch_size, **(options or {})},
                       rewrite)


def engine_paraphraser(backend: str, *, model: str, family: str | None = None, template: str | None = None,
                       temperature: float = 0.7, top_p: float = 0.95, max_new_tokens: int = 1024, seed: int = 0,
                       **backend_options) -> Paraphraser:
    """An instruction model on backend ``backend`` (hf, vllm) of the rollout engine, each prompt one chat
    user turn (:func:`mialab.lm.engine.text_generator`), all prompts in one call; ``backend_options`` go to
    the backend, checked by the engine (:func:`mialab.lm.engine.check_backend_options`)."""
    from mialab.lm.engine import text_generator

    generate = text_generator(model, engine=backend, backend_options=backend_options, max_new_tokens=max_new_tokens,
                              temperature=temperature, top_p=top_p, seed=seed)
    opts = {"model": model, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
            "seed": seed, **backend_options}
    return llm_paraphraser(generate, family=family, template=template, batch_size=None, backend=backend,
                           options=opts)


Paraphrasers.register("hf")(functools.partial(engine_paraphraser, "hf"))
Paraphrasers.register("vllm")(functools.partial(engine_paraphraser, "vllm"))


def get_paraphraser(backend: str, **options) -> Paraphraser:
    """Build paraphrase backend ``backend`` (offline, hf, vllm); unknown names list the known ones."""
    return Paraphrasers.get(backend)(**options)


def row_separator(text: str, prefix: str, suffix: str, *, row_id: str) -> str:
    """What joins ``prefix`` and ``suffix`` into ``text`` (a space, a blank line, ...)."""
    if len(text) < len(prefix) + len(suffix) or not (text.startswith(prefix) and text.endswith(suffix)):
        raise ValueError(f"row {row_id!r}: text is not prefix + separator + suffix; cannot paraphrase it in parts")
    return text[len(prefix):len(text) - len(suffix)]


def paraphrase_split(split: pd.DataFrame, paraphraser: Paraphraser, *, require_both_classes: bool = True
                     ) -> pd.DataFrame:
    """The split with every prefix and suffix paraphrased and ``setting`` = ``paraphrased``.

    Ids, labels, pair ids and row order are unchanged; each distinct segment is paraphrased once.
    """
    split = validate_split(split, name="split to paraphrase", require_both_classes=require_both_classes)
    seps = [row_separator(t, p, s, row_id=i) for t, p, s, i in
            zip(split["text"], split["prefix"], split["suffix"], split["id"])]
    segments = sorted({seg for seg in pd.concat([split["prefix"], split["suffix"]]) if seg.strip()})
    rewritten = dict(zip(segments, paraphraser(segments)))
    out = split.copy()
    out["prefix"] = split["prefix"].map(lambda s: rewritten.get(s, s))
    out["suffix"] = split["suffix"].map(lambda s: rewritten.get(s, s))
    out["text"] = [p + sep + s for p, sep, s in zip(out["prefix"], seps, out["suffix"])]
    out["setting"] = "paraphrased"
    return out


def paraphrase_setting(split: pd.DataFrame, paraphraser: Paraphraser, *, experiment: str
                       ) -> tuple[dict[str, pd.DataFrame], dict]:
    """ADRA's paraphrased setting for ``experiment`` (``existing_model`` or ``finetune``).

    Returns ``{part: split}`` (``evaluate``, plus ``train`` for fine-tuning: the paraphrased rows
    whose members the fine-tuning stage trains on) and a manifest recording each part's setting,
    the backend and its options, and how many rows the paraphrase changed.
    """
    if experiment not in EXPERIMENTS:
        raise KeyError(f"unknown paraphrase experiment {experiment!r}; known: {', '.join(sorted(EXPERIMENTS))}")
    original = validate_split(split, name="split to paraphrase").assign(setting="original")
    paraphrased = paraphrase_split(split, paraphraser)
    parts = {part: paraphrased if setting == "paraphrased" else original
             for part, setting in EXPERIMENTS[experiment].items()}
    changed = int((paraphrased["text"].to_numpy() != original["text"].to_numpy()).sum())
    manifest = {
        "experiment": experiment,
        "setting": dict(EXPERIMENTS[experiment]),
        "paraphraser": {"backend": paraphraser.backend, **paraphraser.options},
        "n_rows": len(original),
        "n_changed": changed,
        "fraction_changed": changed / len(original),
    }
    return parts, manifest


# -- the workflow stage (rules/paraphrase.smk) --------------------------------------------------

def paraphraser_for(spec: dict, *, family: str | None = None) -> Paraphraser:
    """The backend a (normalised) ``paraphrase`` entry names; LLM backends get the dataset's family
    (which picks the prompt template) unless the options name a template or family."""
    options = dict(spec.get("options") or {})
    if spec["backend"] in ("hf", "vllm"):
        options.setdefault("family", family)
    return get_paraphraser(spec["backend"], **options)


def paraphrase_members(pool: pd.DataFrame, paraphraser: Paraphraser) -> pd.DataFrame:
    """A pool whose members (label 1) are paraphrased, non-members untouched, ids and order kept:
    the member pool a fine-tuning stage trains on in the ``training`` setting."""
    pool = validate_split(pool, name="pool to paraphrase", require_both_classes=False)
    members = pool["label"] == 1
    out = pool.assign(setting="original")
    if members.any():
        para = paraphrase_split(pool[members], paraphraser, require_both_classes=False)
        for col in ("text", "prefix", "suffix", "setting"):
            out.loc[members, col] = para[col].to_numpy()
    return out


def _changed_some(info: dict, name: str, paraphraser: Paraphraser) -> dict:
    if info["n_changed"] == 0:
        raise ValueError(f"{name}: the {paraphraser.backend} paraphraser changed none of {info['n_rows']} texts")
    return info


def paraphrased_split(split: pd.DataFrame, paraphraser: Paraphraser, *, name: str) -> tuple[pd.DataFrame, dict]:
    """Rule ``paraphrase``: the split an existing model is evaluated on, paraphrased (ids, labels and
    order kept), and its manifest entry; a paraphraser that changes no text is an error naming ``name``."""
    split = validate_split(split, name=f"{name} split")
    parts, info = paraphrase_setting(split, paraphraser, experiment="existing_model")
    out = validate_split(parts["evaluate"], name=f"{name} paraphrased split")
    assert out["id"].tolist() == split["id"].tolist() and out["label"].tolist() == split["label"].tolist()
    return out, _changed_some(info, name, paraphraser)


def paraphrased_pool(pool: pd.DataFrame, paraphraser: Paraphraser, *, name: str) -> tuple[pd.DataFrame, dict]:
    """Rule ``paraphrase_pool``: :func:`paraphrase_members` of a pool and its manifest entry (the
    ``finetune`` experiment); a paraphraser that changes no member text is an error naming ``name``."""
    pool = validate_split(pool, name=name)
    out = paraphrase_members(pool, paraphraser)
    members = (pool["label"] == 1).to_numpy()
    changed = int((out["text"].to_numpy()[members] != pool["text"].to_numpy()[members]).sum())
    info = {"experiment": "finetune", "setting": {"train": "paraphrased", "evaluate": "original"},
            "paraphraser": {"backend": paraphraser.backend, **paraphraser.options},
            "n_rows": int(members.sum()), "n_changed": changed, "fraction_changed": changed / max(1, members.sum())}
    return out, _changed_some(info, name, paraphraser)
