"""WikiMIA-2024 Hard (Hallinan et al. 2025): paired versions of the same Wikipedia article.

Each article appears twice: its summary as first retrieved (member, ``label`` 1) and as last
edited after the cutoff (non-member, ``label`` 0). Source (hub ``hallisky/wikiMIA-2024-hard`` or
a local folder/file of its jsonl shape; on the hub ``hub_split`` defaults to ``train``, which its
authors made the largest split): columns ``input`` (text), ``label`` and ``title`` (the pairing
key; ``pair_column`` to change it). Both rows of an article share ``pair_id``, so a later
stage can use the paired article as a distractor (ADRA appendix C.3) and sampling keeps pairs
together. Rows whose partner is missing are dropped (logged). Prefix rule: pretraining style,
the first ``prefix_ratio`` (default 0.5) of the words.
"""

from __future__ import annotations

import logging

import pandas as pd

from mialab.data.families._common import content_id, drop_blank, drop_duplicate_texts, pretraining_pool
from mialab.data.registry import register_family
from mialab.data.sources import read_table, require_columns

log = logging.getLogger(__name__)


def complete_pairs(pool: pd.DataFrame, *, family: str) -> pd.DataFrame:
    """Keep only pairs made of exactly one member and one non-member (others logged and dropped)."""
    stats = pool.groupby("pair_id")["label"].agg(["size", "sum"])
    good = stats.index[(stats["size"] == 2) & (stats["sum"] == 1)]
    bad = len(stats) - len(good)
    if bad:
        log.warning("%s: dropped %d incomplete or malformed pair(s)", family, bad)
    return pool[pool["pair_id"].isin(good)].reset_index(drop=True)


@register_family("wikimia_24_hard")
def load_pool(spec: dict) -> pd.DataFrame:
    """Every article version as a candidate, paired by article."""
    src = spec["source"]
    key = spec["pair_column"]
    raw = read_table(src)
    require_columns(raw, ["input", "label", key], source=src)
    raw = drop_blank(raw, ["input", key], family="wikimia_24_hard")
    pool = pretraining_pool(raw["input"].astype(str), family="wikimia_24_hard", source=src,
                            ratio=float(spec["prefix_ratio"]), max_words=spec.get("max_words"),
                            labels=raw["label"],
                            extra={"pair_id": raw[key].map(lambda k: content_id("wikimia_24_hard-pair", str(k)))})
    return complete_pairs(drop_duplicate_texts(pool, family="wikimia_24_hard"), family="wikimia_24_hard")
