"""Texts a tokenizer is trained on: whole text files, or every string cell of a table."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pandas as pd

from mialab.data.sources import read_table


def corpus_texts(sources: list[str]) -> Iterator[str]:
    """Yield the texts of each source: a ``.txt`` file whole, otherwise every string value of its rows."""
    for src in sources:
        if src.endswith(".txt") and Path(src).is_file():
            yield Path(src).read_text(encoding="utf-8")
            continue
        df = read_table(src)
        for col in df.columns:
            if pd.api.types.is_object_dtype(df[col]) or pd.api.types.is_string_dtype(df[col]):
                yield from (v for v in df[col] if isinstance(v, str))
