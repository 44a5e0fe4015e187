"""Building blocks shared by the family modules: content ids, clean-up, and the two prefix rules.

Prefix rules (ADRA appendix B and Table 15):

- *pretraining* (:func:`pretraining_pool`): the first ``ratio`` (0.5) of the words are the prefix,
  the rest the suffix; ``text`` is both joined by a space (whitespace is normalised to single
  spaces, as :func:`mialab.text.prefix.split_words` does).
- *request + response* (:func:`request_response_pool`): the full request (a problem, a user turn)
  plus the first ``ratio`` (0.25) of the response's words are the prefix, the rest of the response
  the suffix; ``prefix = request + "\\n\\n" + head`` and ``text = prefix + " " + suffix`` (the same
  layout as the ``aime`` family).

Ids are content hashes (``<family>-<12 hex>``), so they survive re-reads and reordering.
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pandas as pd

from mialab.data.registry import count_dropped_repeats
from mialab.data.sources import describe
from mialab.text.prefix import split_words, truncate_words

log = logging.getLogger(__name__)


def content_id(family: str, *parts: str) -> str:
    """``family-<first 12 hex digits of sha256 over parts>``."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:12]
    return f"{family}-{digest}"


def as_text(value) -> str | None:
    """A cell as text: strings stay, lists of strings (s1K ``thinking_trajectories``) are joined by
    newlines, missing values become ``None``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        return "\n".join(str(v) for v in value)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return str(value)


def drop_blank(df: pd.DataFrame, columns: list[str], *, family: str, on_blank: str = "drop",
               hint: str = "") -> pd.DataFrame:
    """Drop rows where any of ``columns`` is missing or blank, logging how many (never silent);
    with ``on_blank="error"`` such rows are an error (``hint`` says how to allow them)."""
    blank = np.zeros(len(df), dtype=bool)
    for col in columns:
        values = df[col].map(as_text)
        blank |= values.isna().to_numpy() | (values.fillna("").str.strip() == "").to_numpy()
    if blank.any():
        what = f"{int(blank.sum())} row(s) with a blank {' or '.join(map(repr, columns))}"
        if on_blank == "error":
            raise ValueError(f"{family}: {what}{hint}")
        if on_blank != "drop":
            raise ValueError(f"{family}: on_blank must be 'drop' or 'error', got {on_blank!r}")
        log.warning("%s: dropped %s", family, what)
    return df.loc[~blank].reset_index(drop=True)


def drop_exact_repeats(frame: pd.DataFrame, column: str, *, family: str, what: str) -> pd.DataFrame:
    """``frame`` with one row per value of ``column`` (the first), the repeats logged as ``what`` and counted
    for the pool's manifest (:func:`mialab.data.registry.build_pool`)."""
    repeated = frame[column].duplicated()
    if repeated.any():
        log.warning("%s: dropped %d %s", family, int(repeated.sum()), what)
        count_dropped_repeats(int(repeated.sum()))
    return frame.loc[~repeated].reset_index(drop=True)


def drop_duplicate_texts(pool: pd.DataFrame, *, family: str) -> pd.DataFrame:
    """Drop exact repeats of a candidate ``text`` (logged, counted). The same text labelled both member and
    non-member is an error: membership would be undefined."""
    if "label" in pool.columns:
        conflict = pool.groupby("text")["label"].nunique()
        conflict = conflict[conflict > 1]
        if len(conflict):
            raise ValueError(
                f"{family}: {len(conflict)} text(s) appear as both member and non-member, e.g. "
                f"{conflict.index[0][:80]!r}"
            )
    return drop_exact_repeats(pool, "text", family=family, what="exact duplicate text(s)")


def pretraining_pool(texts: pd.Series, *, family: str, source: str | dict | pd.Series, ratio: float, rounding: str,
                     max_words: int | None = None, labels=None, extra: dict | None = None) -> pd.DataFrame:
    """Pool rows under the pretraining prefix rule (first ``ratio`` of the words, ``rounding``: the pool's
    ``prefix_rounding``, :func:`mialab.text.prefix.split_words`).

    ``max_words`` first truncates long documents; ``labels`` (optional) and ``extra`` columns
    (e.g. ``group``, ``pair_id``) are carried along row by row.
    """
    cut = texts.map(lambda t: split_words(truncate_words(t, max_words), ratio, rounding=rounding))
    pool = pd.DataFrame({"prefix": cut.str[0].to_numpy(), "suffix": cut.str[1].to_numpy()})
    pool["text"] = pool["prefix"] + " " + pool["suffix"]
    return _finish(pool, family=family, source=source, labels=labels, extra=extra)


def request_response_pool(requests: pd.Series, responses: pd.Series, *, family: str, source: str | dict | pd.Series,
                          ratio: float, rounding: str, max_words: int | None = None, labels=None,
                          extra: dict | None = None) -> pd.DataFrame:
    """Pool rows under the request + response rule: full request plus the first ``ratio`` of the
    response's words as prefix (``ratio`` 0: the request alone, the whole response is the suffix).
    ``max_words`` caps the response before cutting."""
    response = responses.map(lambda s: truncate_words(" ".join(str(s).split()), max_words))
    if ratio == 0:
        request = requests.str.strip()
        pool = pd.DataFrame({"prefix": request.to_numpy(), "suffix": response.to_numpy(),
                             "text": (request + "\n\n" + response).to_numpy()})
        return _finish(pool, family=family, source=source, labels=labels, extra=extra)
    cut = response.map(lambda s: split_words(s, ratio, rounding=rounding))
    pool = pd.DataFrame({
        "prefix": (requests.str.strip() + "\n\n" + cut.str[0]).to_numpy(),
        "suffix": cut.str[1].to_numpy(),
    })
    pool["text"] = pool["prefix"] + " " + pool["suffix"]
    return _finish(pool, family=family, source=source, labels=labels, extra=extra)


def _finish(pool: pd.DataFrame, *, family: str, source, labels, extra: dict | None) -> pd.DataFrame:
    """Attach source, labels and extra columns, then content ids."""
    pool["source"] = np.asarray(source) if isinstance(source, pd.Series) else describe(source)
    if labels is not None:
        pool["label"] = np.asarray(labels).astype("int8")
    for col, values in (extra or {}).items():
        pool[col] = values if isinstance(values, str) else np.asarray(values)
    pool["id"] = [content_id(family, t) for t in pool["text"]]
    return pool
