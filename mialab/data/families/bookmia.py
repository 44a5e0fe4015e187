"""BookMIA (Shi et al. 2023): 512-word book snippets, pretraining style.

Source (hub ``swj0419/BookMIA`` or a local file of that shape): columns ``snippet`` (text),
``label`` (1 = book in the pretraining data of the era's models, 0 = published later),
``book`` (title, kept as ``group``). Prefix rule: the first ``prefix_ratio`` (default 0.5) of the
words. ``max_words`` (default none) truncates snippets. Membership: the corpus label
(``rule: label``) or a seeded random partition (``rule: random``).
"""

from __future__ import annotations

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, pretraining_pool
from mialab.data.membership import apply_membership
from mialab.data.registry import register_family
from mialab.data.sources import read_table, require_columns, require_labels


@register_family("bookmia")
def load_pool(spec: dict) -> pd.DataFrame:
    """Every BookMIA snippet as a candidate, grouped by book."""
    src = spec["source"]
    raw = read_table(src)
    require_columns(raw, ["snippet", "label", "book"], source=src)
    raw["label"] = require_labels(raw, "label", source=src)
    raw = drop_blank(raw, ["snippet"], family="bookmia")
    pool = pretraining_pool(raw["snippet"], family="bookmia", source=src,
                            ratio=float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"],
                            max_words=spec.get("max_words"),
                            labels=raw["label"], extra={"group": raw["book"].astype(str)})
    pool = drop_duplicate_texts(pool, family="bookmia")
    return apply_membership(pool, spec["membership"], source_label=pool["label"])
