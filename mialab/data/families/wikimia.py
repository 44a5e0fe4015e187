"""WikiMIA (Shi et al. 2023): Wikipedia event paragraphs, pretraining style.

Source columns: ``input`` (text) and ``label`` (1 = before the Llama-1 cutoff, 0 = 2023 events).
Prefix rule: the first ``prefix_ratio`` of the words. Membership: the corpus label
(``rule: label``) or, in the tiny world, a seeded random partition (``rule: random``).
A missing or non-text ``input``, and a label other than 0 / 1 (a missing one too), is an error
naming its row. A paragraph repeated in the source
is kept once (logged); one repeated with both labels is dropped with every copy (logged with
example ids): its membership is undefined.
"""

from __future__ import annotations

import hashlib
import logging

import pandas as pd

from mialab.data.families._common import drop_exact_repeats
from mialab.data.membership import apply_membership
from mialab.data.registry import register_family
from mialab.data.sources import describe, read_table, require_columns, require_labels, require_text
from mialab.text.prefix import split_words

log = logging.getLogger(__name__)


def _id(text: str) -> str:
    return "wikimia-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def drop_repeats(raw: pd.DataFrame) -> pd.DataFrame:
    """One row per ``input``: exact repeats collapse (logged); inputs labelled both ways are
    dropped entirely (logged with their count and example ids)."""
    labels = raw.groupby("input")["label"].nunique()
    conflicting = labels.index[labels > 1]
    if len(conflicting):
        log.warning("wikimia: dropped %d paragraph(s) that appear with both labels (%d rows), e.g. ids %s",
                    len(conflicting), int(raw["input"].isin(conflicting).sum()),
                    [_id(t) for t in conflicting[:3]])
        raw = raw[~raw["input"].isin(conflicting)]
    return drop_exact_repeats(raw, "input", family="wikimia", what="exact repeat(s) of a paragraph")


@register_family("wikimia")
def load_pool(spec: dict) -> pd.DataFrame:
    """Every WikiMIA row as a candidate; ids are content hashes so they survive reordering."""
    raw = read_table(spec["source"])
    require_columns(raw, ["input", "label"], source=spec["source"])
    require_text(raw, ["input"], source=spec["source"])
    raw["label"] = require_labels(raw, "label", source=spec["source"])
    raw = drop_repeats(raw)
    cut = raw["input"].map(lambda t: split_words(t, float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"]))
    pool = pd.DataFrame({
        "id": raw["input"].map(_id),
        "prefix": cut.str[0],
        "suffix": cut.str[1],
        "source": describe(spec["source"]),
    })
    pool["text"] = pool["prefix"] + " " + pool["suffix"]
    return apply_membership(pool, spec["membership"], source_label=raw["label"])
