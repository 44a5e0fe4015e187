"""Plain training corpora (filler text for pretraining and SFT), read from a file or a table."""

from __future__ import annotations

from pathlib import Path

from mialab.data.prefix import truncate_words
from mialab.data.sources import read_table, require_columns


def read_corpus(spec: str | dict) -> list[str]:
    """Texts of a corpus.

    ``spec`` is a ``.txt`` path (one text: the whole file) or ``{source, columns, query, max_words}``:
    rows of a table (``query`` a pandas query such as ``"year < 2011"``), the ``columns`` joined by a
    blank line, each text capped at ``max_words`` words (applied to the last column).
    """
    if isinstance(spec, str):
        spec = {"source": spec}
    src = spec["source"]
    if str(src).endswith(".txt") and Path(src).is_file():
        return [Path(src).read_text(encoding="utf-8")]
    df = read_table(src)
    cols = spec.get("columns", ["text"])
    require_columns(df, cols, source=src)
    if spec.get("query"):
        df = df.query(spec["query"])
    texts = []
    for row in df[cols].itertuples(index=False):
        *head, last = [" ".join(str(v).split()) if i == len(cols) - 1 else str(v).strip() for i, v in enumerate(row)]
        texts.append("\n\n".join([*head, truncate_words(last, spec.get("max_words"))]))
    if not texts:
        raise ValueError(f"corpus {src!r} (query {spec.get('query')!r}) is empty")
    return texts
