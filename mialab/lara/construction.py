"""Stage: build every text LaRA reads, one row per (question, role).

For a question ``Q`` with neighbours ``N_0..N_{M-1}`` and ``K`` variants per blanked text, the
table holds ``(M + 1) * (K + 2)`` rows:

| role | neighbour | form | variant |
|---|---|---|---|
| ``original`` / ``neighbour_k`` | -1 / k | original | -1 |
| ``blank`` / ``neighbour_k_blank`` | -1 / k | blank | -1 |
| ``variant_j`` / ``neighbour_k_variant_j`` | -1 / k | variant | j |

Blanking uses one backend and one parameter set for ``Q`` and all its neighbours, so the only
difference between their perturbations is the text itself.
"""

from __future__ import annotations

import pandas as pd

from mialab.lara.blanking import blank_important
from mialab.lara.neighbours import find_neighbours
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
    variants = paraphrase_variants(blanked, n_variants, pp_spec.pop("backend"), **pp_spec)
    rows = []
    for (qid, k, text), b, vs in zip(units, blanked, variants):
        rows.append((qid, role_name(k, "original"), k, "original", -1, text))
        rows.append((qid, role_name(k, "blank"), k, "blank", -1, b))
        rows += [(qid, role_name(k, "variant", j), k, "variant", j, v) for j, v in enumerate(vs)]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)
