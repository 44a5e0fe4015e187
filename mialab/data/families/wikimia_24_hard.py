"""WikiMIA-2024 Hard (Hallinan et al. 2025): paired versions of the same Wikipedia article.

Each article appears twice: its summary as first retrieved (member, ``label`` 1) and as last
edited after the cutoff (non-member, ``label`` 0). Source (hub ``hallisky/wikiMIA-2024-hard`` or
a local folder/file of its jsonl shape; on the hub ``hub_split`` defaults to ``train``, which its
authors made the largest split): columns ``input`` (text), ``label`` and ``title`` (the pairing
key; ``pair_column`` to change it, a list of columns pairs on all of them: the released code pairs by
``[title, id]``). Both rows of an article share ``pair_id``, so a later stage can use the paired
article as a distractor (ADRA appendix C.3) and sampling keeps pairs together. Rows whose partner is
missing are dropped (logged). Prefix rule: pretraining style, the first ``prefix_ratio`` (default
0.5) of the words.

The released code's filters (``pre_training_custom_mia.py`` on the hub's ``test`` split), applied
before pairing when set: ``diff_threshold`` keeps rows whose ``diff`` column exceeds it (400);
``min_tokens`` / ``max_tokens`` keep rows whose stripped ``input`` has that many tokens of
``tokenizer`` (256-1024 of allenai/tulu-2-7b, special tokens counted as its ``encode`` does).
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


def filtered(raw: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Rows passing the released code's ``diff`` and token-length filters (module doc; unset = no filter)."""
    keep = pd.Series(True, index=raw.index)
    if spec.get("diff_threshold") is not None:
        keep &= pd.to_numeric(raw["diff"], errors="coerce") > spec["diff_threshold"]
    lo, hi = spec.get("min_tokens"), spec.get("max_tokens")
    if lo is not None or hi is not None:
        if not spec.get("tokenizer"):
            raise ValueError("wikimia_24_hard: min_tokens / max_tokens need tokenizer (the tokenizer that counts them)")
        from mialab.lm.loading import load_tokenizer

        tok = load_tokenizer(spec["tokenizer"])
        n = raw["input"].astype(str).str.strip().map(lambda t: len(tok(t)["input_ids"]))
        keep &= n.ge(lo if lo is not None else 0) & n.le(hi if hi is not None else n.max())
    if not keep.all():
        log.warning("wikimia_24_hard: the diff / token filters dropped %d of %d rows", int((~keep).sum()), len(raw))
    return raw[keep].reset_index(drop=True)


@register_family("wikimia_24_hard")
def load_pool(spec: dict) -> pd.DataFrame:
    """Every article version as a candidate, paired by article."""
    src = spec["source"]
    keys = [spec["pair_column"]] if isinstance(spec["pair_column"], str) else list(spec["pair_column"])
    raw = read_table(src)
    require_columns(raw, ["input", "label", *keys, *(["diff"] if spec.get("diff_threshold") is not None else [])],
                    source=src)
    raw = filtered(drop_blank(raw, ["input", *keys], family="wikimia_24_hard"), spec)
    pair_key = raw[keys].astype(str).agg("\x1f".join, axis=1)
    pool = pretraining_pool(raw["input"].astype(str), family="wikimia_24_hard", source=src,
                            ratio=float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"],
                            max_words=spec.get("max_words"),
                            labels=raw["label"],
                            extra={"pair_id": pair_key.map(lambda k: content_id("wikimia_24_hard-pair", k))})
    return complete_pairs(drop_duplicate_texts(pool, family="wikimia_24_hard"), family="wikimia_24_hard")
