"""Stage: build every text LaRA reads, one row per (question, role).

For a question ``Q`` with neighbours ``N_0..N_{M-1}`` and ``K`` variants per blanked text, the
table holds ``(M + 1) * (K + 2)`` rows:

| role | neighbour | form | variant |
|---|---|---|---|
| ``original`` / ``neighbour_k`` | -1 / k | original | -1 |
| ``blank`` / ``neighbour_k_blank`` | -1 / k | blank | -1 |
| ``variant_j`` / ``neighbour_k_variant_j`` | -1 / k | variant | j |

Blanking uses one backend and one parameter set for ``Q`` and all its neighbours, so the only
difference between their perturbations is the text itself. An LLM blank still invalid after its attempts
drops that neighbour, as the released code drops it (``rep_stiff.py``: a similar question without a valid
incomplete version leaves the group, down to ``min_valid_similars`` =
:data:`mialab.lara.neighbours.MIN_NEIGHBOURS`); the table then numbers a question's kept neighbours
``0..M'-1`` (an LLM may also have written fewer than ``M``:
:func:`mialab.lara.neighbours.llm_neighbours`). The question's own blank invalid, or fewer than
:data:`MIN_NEIGHBOURS` neighbours kept, is an error (the code scores such a question NaN and leaves it out).
"""

from __future__ import annotations

import itertools
import logging

import pandas as pd

from mialab.lara.blanking import blank_important
from mialab.lara.neighbours import MIN_NEIGHBOURS, find_neighbours
from mialab.lara.paraphrase import paraphrase_variants

TABLE_COLUMNS = ["id", "role", "neighbour", "form", "variant", "text"]

FORMS = ("original", "blank", "variant")


def role_name(neighbour: int, form: str, variant: int = -1) -> str:
    """``original``, ``blank``, ``variant_j``, ``neighbour_k``, ``neighbour_k_blank``, ``neighbour_k_variant_j``."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")
    parts = [] if neighbour < 0 else [f"neighbour_{neighbour}"]
    if form == "blank":
        parts.append("blank")
    elif form == "variant":
        parts.append(f"variant_{variant}")
    return "_".join(parts) or "original"


def build_perturbations(questions: pd.DataFrame, *, neighbours: dict, n_neighbours: int = 5, n_variants: int = 5,
                        blank: dict | None = None,
                        paraphrase: dict | None = None) -> pd.DataFrame:
    """The perturbation table (:data:`TABLE_COLUMNS`) for questions with columns ``id``, ``text``.

    ``neighbours``, ``blank`` and ``paraphrase`` are ``{"backend": name or callable, **options}``, e.g.
    ``{"backend": "retrieval", "pool": [...]}``; blanking and paraphrasing default to
    ``numbers_entities`` and ``wordnet``. The neighbour source has no default on purpose: a pool
    holding the other evaluated questions would put members among a member's controls.
    """
    ids = questions["id"].astype(str).tolist()
    texts = questions["text"].astype(str).tolist()
    nb_spec = dict(neighbours)
    bl_spec = dict(blank or {"backend": "numbers_entities"})
    pp_spec = dict(paraphrase or {"backend": "wordnet"})
    nbs = find_neighbours(texts, n_neighbours, nb_spec.pop("backend"), **nb_spec)
    units = [(qid, k, text) for qid, q, qn in zip(ids, texts, nbs) for k, text in [(-1, q), *enumerate(qn)]]
    blanked = blank_important([u[2] for u in units], bl_spec.pop("backend"), **bl_spec)
    units, blanked = kept_units(units, blanked)
    variants = paraphrase_variants(blanked, n_variants, pp_spec.pop("backend"), **pp_spec)
    rows = []
    for (qid, k, text), b, vs in zip(units, blanked, variants):
        rows.append((qid, role_name(k, "original"), k, "original", -1, text))
        rows.append((qid, role_name(k, "blank"), k, "blank", -1, b))
        rows += [(qid, role_name(k, "variant", j), k, "variant", j, v) for j, v in enumerate(vs)]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def kept_units(units: list[tuple[str, int, str]], blanked: list[str | None]) -> tuple[list, list[str]]:
    """The (question id, neighbour, text) units whose blank is valid (not None) and their blanks, each question's
    kept neighbours renumbered from 0 (module doc: a question's own invalid blank, or fewer than
    :data:`MIN_NEIGHBOURS` kept neighbours, is an error)."""
    kept, out, dropped = [], [], 0
    for qid, members in itertools.groupby(zip(units, blanked, strict=True), key=lambda pair: pair[0][0]):
        group = list(members)
        (question, own), neighbours = group[0], [(u, b) for u, b in group[1:] if b is not None]
        if own is None:
            raise ValueError(f"question {qid}: its blank stays invalid after every attempt (the released code scores "
                             "such a question NaN and leaves it out of the AUC)")
        if len(neighbours) < MIN_NEIGHBOURS:
            raise ValueError(f"question {qid}: {len(neighbours)} of {len(group) - 1} neighbours have a valid blank, "
                             f"{MIN_NEIGHBOURS} needed (the released code's min_valid_similars)")
        dropped += len(group) - 1 - len(neighbours)
        kept += [question, *((qid, k, u[2]) for k, (u, _) in enumerate(neighbours))]
        out += [own, *(b for _, b in neighbours)]
    if dropped:
        logging.getLogger(__name__).warning("%d neighbour(s) without a valid blank left their question's group",
                                            dropped)
    return kept, out
