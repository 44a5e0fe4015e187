"""Dolma3 arXiv (ADRA appendix B.1): arXiv documents of the Dolma3 pretraining mix vs later papers.

``source``: the members, arXiv documents from the Dolma3 mix (Proof-Pile-2 arXiv, cutoff April 2023; a
Dolma-shaped file or hub id with a ``text`` column). ``nonmember_source``: arXiv papers released after the mix
cutoff (same ``text`` column; the paper checks them with OlmoTrace). ``text_column`` renames the text column
for both. Without ``nonmember_source``, ``source`` holds both, labelled by its ``label`` column (1 member, 0
non-member): the ADRA authors' ``ADRA-RL/Dolma3-Arxiv-MIA-1k``
(``adra/utils_rl/process_data/process_dolma3_arxiv_mia.py``: 1,000 of each, already cut to 2,048 Tulu-2
tokens). Documents are long, so they are truncated before the pretraining prefix rule (first ``prefix_ratio``,
default 0.5, of words): to their first ``max_tokens`` tokens of ``tokenizer`` when both are set (the released
code: 2048 tokens of the Tulu-2 tokenizer, decoded back to text), else to ``max_words`` words (default 512,
our offline choice: the opening of the paper, within ADRA's 1028-token prompt/response budget).
"""

from __future__ import annotations

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, pretraining_pool
from mialab.data.registry import register_family
from mialab.data.sources import describe, read_table, require_columns, require_labels


def token_truncator(tokenizer: str, max_tokens: int):
    """``text -> its first max_tokens tokens of tokenizer``, decoded (shorter texts unchanged)."""
    from mialab.lm.loading import load_tokenizer

    tok = load_tokenizer(tokenizer)

    def truncate(text: str) -> str:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= max_tokens else tok.decode(ids[:max_tokens], skip_special_tokens=True,
                                                               clean_up_tokenization_spaces=False)
    return truncate


@register_family("dolma3_arxiv")
def load_pool(spec: dict) -> pd.DataFrame:
    """Members from ``source``, non-members from ``nonmember_source``; without it, both from ``source``'s labels."""
    col = spec["text_column"]
    frames = []
    if "nonmember_source" in spec:
        for label, key in ((1, "source"), (0, "nonmember_source")):
            part = read_table(spec[key])
            require_columns(part, [col], source=spec[key])
            frames.append(pd.DataFrame({"text": part[col], "label": label, "source": describe(spec[key])}))
    else:   # one labelled table
        part = read_table(spec["source"])
        require_columns(part, [col, "label"], source=spec["source"])
        frames.append(pd.DataFrame({"text": part[col], "label": require_labels(part, "label", source=spec["source"]),
                                    "source": describe(spec["source"])}))
    raw = drop_blank(pd.concat(frames, ignore_index=True), ["text"], family="dolma3_arxiv")
    texts, max_words = raw["text"].astype(str), spec["max_words"]
    if spec.get("max_tokens") is not None:
        if not spec.get("tokenizer"):
            raise ValueError("dolma3_arxiv: max_tokens needs tokenizer (the tokenizer that counts them)")
        texts, max_words = texts.map(token_truncator(spec["tokenizer"], int(spec["max_tokens"]))), None
    pool = pretraining_pool(texts, family="dolma3_arxiv", source=raw["source"],
                            ratio=float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"],
                            max_words=max_words, labels=raw["label"])
    return drop_duplicate_texts(pool, family="dolma3_arxiv")
