"""WikiMIA (Shi et al. 2023): Wikipedia event paragraphs, pretraining style.

Source columns: ``input`` (text) and ``label`` (1 = before the Llama-1 cutoff, 0 = 2023 events).
Prefix rule: the first ``prefix_ratio`` (default 0.5) of the words. Membership: the corpus label
(``rule: label``) or, in the tiny world, a seeded random partition (``rule: random``).
"""

from __future__ import annotations

import hashlib

import pandas as pd

from mialab.data.membership import apply_membership
from mialab.data.prefix import split_words
from mialab.data.registry import register_family
from mialab.data.sources import read_table, require_columns


@register_family("wikimia")
def load_pool(spec: dict) -> pd.DataFrame:
    """Every WikiMIA row as a candidate; ids are content hashes so they survive reordering."""
    raw = read_table(spec["source"], split=spec.get("hub_split", "train"))
    require_columns(raw, ["input", "label"], source=spec["source"])
    ratio = float(spec.get("prefix_ratio", 0.5))
    raw = raw.drop_duplicates("input").reset_index(drop=True)
    cut = raw["input"].map(lambda t: split_words(t, ratio))
    pool = pd.DataFrame({
        "id": raw["input"].map(lambda t: "wikimia-" + hashlib.sha256(t.encode()).hexdigest()[:12]),
        "prefix": cut.str[0],
        "suffix": cut.str[1],
        "source": spec["source"],
    })
    pool["text"] = pool["prefix"] + " " + pool["suffix"]
    return apply_membership(pool, spec.get("membership", {"rule": "label"}), source_label=raw["label"])
