"""MIMIR (Duan et al. 2024): Pile members vs Pile-test non-members, one Pile domain at a time.

``source`` is either
- a local folder laid out as ``members/<domain>.jsonl`` and ``non-members/<domain>.jsonl``, each
  line one JSON string (the PETAL copy of the 7-gram 0.2 split in ``shared/data/mimir_ngram7``), or
- the hub dataset ``{hub: iamgroot42/mimir, split: ngram_7_0.2}`` (``split`` names the n-gram
  split), read with ``domain`` as subset, columns ``member`` and ``nonmember``.

``domain`` (required): e.g. ``arxiv``, ``dm_mathematics`` (``dm`` locally), ``github``,
``pile_cc``, ``wikipedia``. Classes are unbalanced in several domains; sampling balances them.
Prefix rule: pretraining style, the first ``prefix_ratio`` (default 0.5) of the words;
``max_words`` (default none) truncates documents.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, pretraining_pool
from mialab.data.registry import register_family
from mialab.data.sources import describe, is_hub, read_table, require_columns

_FOLDERS = {1: "members", 0: "non-members"}


def read_mimir(source: str | dict, domain: str) -> pd.DataFrame:
    """Columns ``text`` and ``label`` for one domain, from the local layout or the hub."""
    if not is_hub(source) and Path(source).is_dir():
        root = Path(source)
        frames = []
        for label, folder in _FOLDERS.items():
            path = root / folder / f"{domain}.jsonl"
            if not path.exists():
                known = sorted(p.stem for p in (root / "members").glob("*.jsonl"))
                raise FileNotFoundError(f"mimir: {path} does not exist; domains under {root}: {known}")
            part = read_table(str(path))
            require_columns(part, ["text"], source=str(path))
            frames.append(part[["text"]].assign(label=label))
        return pd.concat(frames, ignore_index=True)
    raw = read_table(source, subset=domain)
    require_columns(raw, ["member", "nonmember"], source=source)
    return pd.concat([pd.DataFrame({"text": raw["member"], "label": 1}),
                      pd.DataFrame({"text": raw["nonmember"], "label": 0})], ignore_index=True)


@register_family("mimir")
def load_pool(spec: dict) -> pd.DataFrame:
    """Every member and non-member document of ``spec['domain']`` as a candidate."""
    src, domain = spec["source"], spec["domain"]
    raw = drop_blank(read_mimir(src, domain), ["text"], family="mimir")
    pool = pretraining_pool(raw["text"].astype(str), family=f"mimir_{domain}", source=f"{describe(src)}:{domain}",
                            ratio=float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"],
                            max_words=spec.get("max_words"),
                            labels=raw["label"], extra={"group": domain})
    return drop_duplicate_texts(pool, family="mimir")
