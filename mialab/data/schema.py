"""The split schema every stage reads: one row per candidate text.

Columns (all required):

- ``id`` (str): stable identifier, unique within a split, the same across seeds and settings.
- ``text`` (str): the full candidate as scored by the passive baselines (``prefix`` + ``suffix``
  joined by the family's separator).
- ``prefix`` (str): what a reconstruction attack is given.
- ``suffix`` (str): what it must reconstruct.
- ``label`` (int8): 1 = member (in the target's training data), 0 = non-member.
- ``source`` (str): where the row came from (file or hub id and the row's own key).

Optional columns: ``pair_id`` (str; paired members/non-members share it), ``group`` (str; e.g. a
year or a paper), ``setting`` (``original`` or ``paraphrased``).
"""

from __future__ import annotations

import pandas as pd

REQUIRED_COLUMNS: dict[str, str] = {
    "id": "string",
    "text": "string",
    "prefix": "string",
    "suffix": "string",
    "label": "int",
    "source": "string",
}


class SplitSchemaError(ValueError):
    """A split or pool does not match the documented schema."""


def validate_split(df: pd.DataFrame, *, name: str = "split", require_both_classes: bool = True) -> pd.DataFrame:
    """Check ``df`` against the split schema and return it with canonical dtypes.

    Raises :class:`SplitSchemaError` naming the problem: a missing column, an empty split, a
    label other than 0/1, duplicate ids, an empty text, or (by default) a missing class.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise SplitSchemaError(f"{name}: missing column(s) {missing}; required: {list(REQUIRED_COLUMNS)}")
    if len(df) == 0:
        raise SplitSchemaError(f"{name}: empty (0 rows)")
    out = df.copy()
    for col, kind in REQUIRED_COLUMNS.items():
        if kind == "string":
            if out[col].isna().any():
                raise SplitSchemaError(f"{name}: column {col!r} has missing values")
            out[col] = out[col].astype(str)
    bad = set(pd.unique(out["label"])) - {0, 1}
    if bad:
        raise SplitSchemaError(f"{name}: column 'label' must be 0 or 1, found {sorted(map(str, bad))}")
    out["label"] = out["label"].astype("int8")
    if out["id"].duplicated().any():
        dups = out.loc[out["id"].duplicated(), "id"].head(5).tolist()
        raise SplitSchemaError(f"{name}: duplicate ids, e.g. {dups}")
    empty = out["text"].str.strip() == ""
    if empty.any():
        raise SplitSchemaError(f"{name}: {int(empty.sum())} row(s) with empty text, e.g. id {out.loc[empty, 'id'].iloc[0]!r}")
    if require_both_classes:
        counts = out["label"].value_counts()
        for lab, what in ((1, "members"), (0, "non-members")):
            if counts.get(lab, 0) == 0:
                raise SplitSchemaError(f"{name}: no {what} (label={lab})")
    return out
