"""Semantic neighbours of each question: the structural control group of LaRA.

Backends:

- ``retrieval`` (offline): the nearest questions of a pool by cosine similarity of
  :func:`mialab.lm.embeddings.encode` embeddings, searched with a faiss ``IndexFlatIP``; the
  question itself and exact (case/whitespace-insensitive) duplicates are never returned.
- ``llm``: an instruction model writes neighbours from ``resources/prompts/lara/neighbours.txt``, asked
  again (a fresh sample) while short of ``m``, up to the code's 7 times, then keeping what it has down to
  :data:`MIN_NEIGHBOURS` (the code's ``make_similar_questions.py`` keeps what it got; ``rep_stiff.py`` scores a
  group from 2 valid neighbours); optionally falling back to another backend for a question it fails on, e.g.
  in a rehearsal.
"""

from __future__ import annotations

from typing import Callable

from mialab.core.registry import Registry
from mialab.lm.embeddings import DEFAULT_MODEL
from mialab.text.llm_prompts import Generate, collect_items, load_template, normalise_text, parse_list
from mialab.text.spans import BLANK

NeighbourBackend = Registry("neighbour backend")
#: the fewest neighbours a question keeps (the code's ``RepStiffDetector(min_valid_similars=2)``)
MIN_NEIGHBOURS = 2
#: how often an LLM is asked for a question's neighbours (the code's ``OPENROUTER_MAX_RETRIES`` 6, plus one)
LLM_ATTEMPTS = 7


def unique_texts(texts: list[str]) -> list[str]:
    """``texts`` without exact duplicates (case/whitespace-insensitive), first occurrence kept."""
    seen: set[str] = set()
    out = []
    for t in texts:
        key = normalise_text(t)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


@NeighbourBackend.register("retrieval")
def retrieval_neighbours(questions: list[str], m: int, *, pool: list[str], model: str = DEFAULT_MODEL,
                         device: str = "cpu", dtype: str = "float32") -> list[list[str]]:
    """The ``m`` pool questions most similar to each question (most similar first); the encoder
    computes in ``dtype`` (see :func:`mialab.lm.embeddings.encode`)."""
    import faiss

    from mialab.lm.embeddings import encode

    candidates = unique_texts(pool)
    if len(candidates) < m + 1:
        raise ValueError(f"the pool has {len(candidates)} distinct questions; {m} neighbours need at least {m + 1}")
    emb = encode(candidates, model=model, device=device, dtype=dtype)
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    # The pool is duplicate-free, so at most one hit (the question itself) is dropped.
    _, hits = index.search(encode(questions, model=model, device=device, dtype=dtype), m + 1)
    out = []
    for q, row in zip(questions, hits):
        key = normalise_text(q)
        out.append([candidates[i] for i in row if i >= 0 and normalise_text(candidates[i]) != key][:m])
    return out


@NeighbourBackend.register("llm")
def llm_neighbours(questions: list[str], m: int, *, generate: Generate, template: str = "neighbours",
                   max_attempts: int = LLM_ATTEMPTS,
                   fallback: Callable[..., list[list[str]]] | None = None) -> list[list[str]]:
    """LLM-written neighbours; copies of the question and items with ``[BLANK]`` are rejected. A question short
    of ``m`` is asked again, up to ``max_attempts`` times, then keeps the neighbours it has if they are at least
    :data:`MIN_NEIGHBOURS`; fewer: ``fallback(questions, m)`` (e.g. :func:`retrieval_neighbours`) gives that
    question's neighbours, else an error."""
    tpl = load_template(template)
    prompts = [tpl.format(question=q, m=m) for q in questions]

    def accept(i: int, out: str) -> list[str]:
        key = normalise_text(questions[i])
        return [x for x in parse_list(out) if normalise_text(x) != key and BLANK not in x]

    rest = None if fallback is None else (lambda short: fallback([questions[i] for i in short], m))
    return collect_items(prompts, generate, accept, m, max_attempts=max_attempts, what="llm neighbours",
                         min_items=min(m, MIN_NEIGHBOURS), fallback=rest)


def find_neighbours(questions: list[str], m: int = 5, backend: str | Callable[..., list[list[str]]] = "retrieval",
                    **options) -> list[list[str]]:
    """Up to ``m`` distinct neighbours per question (at least :data:`MIN_NEIGHBOURS`; the LLM backend may keep
    fewer than ``m``), none equal to the question itself. ``backend`` is a registered name or any callable
    ``(questions, m, **options) -> neighbours``."""
    out = NeighbourBackend.resolve(backend)(list(questions), m, **options)
    for q, nbs in zip(questions, out, strict=True):
        keys = [normalise_text(x) for x in nbs]
        if not min(m, MIN_NEIGHBOURS) <= len(nbs) <= m or len(set(keys)) != len(nbs) or normalise_text(q) in keys:
            name = getattr(backend, "__name__", backend)
            raise ValueError(f"{name}: need {m} distinct neighbours other than the question, got {nbs!r}")
    return out
