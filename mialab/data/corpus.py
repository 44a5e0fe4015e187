"""Plain training corpora (filler text for pretraining and SFT), read from a file or a table."""

from __future__ import annotations

import operator
from pathlib import Path

import pandas as pd

from mialab.data.registry import config_schema
from mialab.data.sources import column_values, read_table
from mialab.text.prefix import truncate_words

#: a table corpus's ``columns`` when its spec names none (the schema's ``$defs/corpus`` default)
DEFAULT_COLUMNS: list = next(form for form in config_schema()["$defs"]["corpus"]["oneOf"]
                             if "properties" in form)["properties"]["columns"]["default"]

# ``where`` conditions: a fixed set of comparisons, so a config string is never evaluated
OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
       ">=": operator.ge, "in": lambda col, v: col.isin(v), "not_in": lambda col, v: ~col.isin(v)}


def row_filter(df: pd.DataFrame, where: list[dict], *, source: str) -> pd.Series:
    """Boolean mask of the rows of ``df`` meeting every ``{column, op, value}`` condition.

    ``op`` is one of :data:`OPS`; ``in`` / ``not_in`` take a list. An unknown column or op is an
    error naming ``source`` (the file the rows come from).
    """
    mask = pd.Series(True, index=df.index)
    for i, cond in enumerate(where):
        column, op, value = cond["column"], cond["op"], cond["value"]
        if column not in df.columns:
            raise ValueError(f"{source}: where[{i}] names column {column!r}; the columns are {list(df.columns)}")
        if op not in OPS:
            raise ValueError(f"{source}: where[{i}] has op {op!r}; known: {', '.join(OPS)}")
        if (op in ("in", "not_in")) != isinstance(value, list):
            raise ValueError(f"{source}: where[{i}]: op {op!r} takes "
                             f"{'a list' if op in ('in', 'not_in') else 'a single value'}, got {value!r}")
        try:
            mask &= OPS[op](df[column], value)
        except TypeError:  # a string compared with numbers (value: "2014" for a year), ...
            raise ValueError(f"{source}: where[{i}]: column {column!r} holds {df[column].dtype} values, which "
                             f"op {op!r} cannot compare with {value!r}; give a value of the column's type") from None
    return mask


def corpus_rows(spec: dict) -> pd.DataFrame:
    """The rows of a table corpus ``{source, where, ...}`` that meet its ``where`` conditions (:func:`row_filter`)."""
    df = read_table(spec["source"])
    return df[row_filter(df, spec["where"], source=spec["source"])] if spec.get("where") else df


def read_corpus(spec: str | dict) -> list[str]:
    """Texts of a corpus.

    ``spec`` is a ``.txt`` path (one text: the whole file) or ``{source, columns, where, max_words}``:
    rows of a table (``where`` conditions such as ``[{column: year, op: "<", value: 2011}]``, see
    :func:`row_filter`), the ``columns`` (names, or paths into cells such as ``prompt[-1].content``:
    :func:`mialab.data.sources.column_values`) joined by a blank line, each text capped at ``max_words``
    words (applied to the last column).
    """
    if isinstance(spec, str):
        spec = {"source": spec}
    src = spec["source"]
    if str(src).endswith(".txt") and Path(src).is_file():
        return [Path(src).read_text(encoding="utf-8")]
    df = corpus_rows(spec)
    cols = spec.get("columns", DEFAULT_COLUMNS)
    texts = []
    for row in zip(*(column_values(df, c, source=src) for c in cols)):
        *head, last = [" ".join(str(v).split()) if i == len(cols) - 1 else str(v).strip() for i, v in enumerate(row)]
        texts.append("\n\n".join([*head, truncate_words(last, spec.get("max_words"))]))
    if not texts:
        raise ValueError(f"corpus {src!r} (where {spec.get('where')!r}) is empty")
    return texts
