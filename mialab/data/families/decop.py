"""arXivTection and BookTection (DE-COP, Duarte et al. 2024): passages from arXiv papers / books.

Source (a local CSV such as ``arXivTection.csv``, or hub ``avduarte333/arXivTection`` /
``avduarte333/BookTection``): columns ``Example_A`` (the original passage; B-D are paraphrases
used by DE-COP's quiz, not candidates), ``Label`` (1 = member, 0 = non-member) and ``ID`` (the
paper or book title, kept as ``group``). Blank passages are dropped (logged; arXivTection has one).
Prefix rule: pretraining style, the first ``prefix_ratio`` (default 0.5) of the words.
Membership: the corpus label (``rule: label``) or a seeded random partition (``rule: random``).
"""

from __future__ import annotations

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, pretraining_pool
from mialab.data.membership import apply_membership
from mialab.data.registry import register_family
from mialab.data.sources import read_table, require_columns, require_labels


def decop_pool(spec: dict, *, family: str) -> pd.DataFrame:
    """Candidates from a DE-COP benchmark table (original passages only)."""
    src = spec["source"]
    raw = read_table(src)
    require_columns(raw, ["Example_A", "Label", "ID"], source=src)
    raw["Label"] = require_labels(raw, "Label", source=src)
    raw = drop_blank(raw, ["Example_A"], family=family)
    pool = pretraining_pool(raw["Example_A"].astype(str), family=family, source=src,
                            ratio=float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"],
                            max_words=spec.get("max_words"),
                            labels=raw["Label"], extra={"group": raw["ID"].astype(str)})
    pool = drop_duplicate_texts(pool, family=family)
    return apply_membership(pool, spec["membership"], source_label=pool["label"])


@register_family("arxivtection")
def load_arxivtection(spec: dict) -> pd.DataFrame:
    """arXivTection passages (members: papers before the model cutoff)."""
    return decop_pool(spec, family="arxivtection")


@register_family("booktection")
def load_booktection(spec: dict) -> pd.DataFrame:
    """BookTection passages (members: books before the model cutoff)."""
    return decop_pool(spec, family="booktection")
