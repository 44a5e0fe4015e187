"""Dolma3 arXiv (ADRA appendix B.1): arXiv documents of the Dolma3 pretraining mix vs later papers.

``source``: the members, arXiv documents from the Dolma3 mix (Proof-Pile-2 arXiv, cutoff April
2023; a Dolma-shaped file or hub id with a ``text`` column). ``nonmember_source``: arXiv papers
released after the mix cutoff (same ``text`` column; the paper checks them with OlmoTrace).
``text_column`` renames the text column for both. Documents are long, so ``max_words`` (default
512, our choice: the opening of the paper, within ADRA's 1028-token prompt/response budget)
truncates them before the pretraining prefix rule (first ``prefix_ratio``, default 0.5, of words).
"""

from __future__ import annotations

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, pretraining_pool
from mialab.data.registry import register_family
from mialab.data.sources import read_table, require_columns


@register_family("dolma3_arxiv")
def load_pool(spec: dict) -> pd.DataFrame:
    """Members from ``source``, non-members from ``nonmember_source``."""
    if "nonmember_source" not in spec:
        raise KeyError("dolma3_arxiv: the pool spec needs 'nonmember_source' (arXiv papers after the cutoff)")
    col = spec.get("text_column", "text")
    frames = []
    for label, key in ((1, "source"), (0, "nonmember_source")):
        part = read_table(spec[key], split=spec.get("hub_split", "train"))
        require_columns(part, [col], source=spec[key])
        frames.append(pd.DataFrame({"text": part[col], "label": label, "source": spec[key]}))
    raw = drop_blank(pd.concat(frames, ignore_index=True), ["text"], family="dolma3_arxiv")
    pool = pretraining_pool(raw["text"].astype(str), family="dolma3_arxiv", source=raw["source"],
                            ratio=float(spec.get("prefix_ratio", 0.5)), max_words=spec.get("max_words", 512),
                            labels=raw["label"])
    return drop_duplicate_texts(pool, family="dolma3_arxiv")
