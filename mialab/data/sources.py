"""Read a raw corpus from a local file/folder or, on a cluster with hub access, a hub dataset id.

Local paths are tried first; anything that is not an existing path is treated as a hub id and
read through ``datasets.load_dataset`` (which honours ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

_READERS = {
    ".parquet": pd.read_parquet,
    ".csv": pd.read_csv,
    ".tsv": lambda p: pd.read_csv(p, sep="\t"),
}


def _read_json(path: Path) -> pd.DataFrame:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        return pd.DataFrame(json.loads(text))
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if rows and not isinstance(rows[0], dict):  # a jsonl of bare strings (MIMIR)
        return pd.DataFrame({"text": rows})
    return pd.DataFrame(rows)


def read_local(path: str | Path) -> pd.DataFrame:
    """Read one local file (parquet, csv, tsv, json, jsonl) or every such file in a folder, concatenated."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (*_READERS, ".json", ".jsonl"))
        if not files:
            raise FileNotFoundError(f"{path}: folder holds no parquet/csv/tsv/json/jsonl file")
        return pd.concat([read_local(f) for f in files], ignore_index=True)
    if path.suffix in (".json", ".jsonl"):
        return _read_json(path)
    try:
        reader = _READERS[path.suffix]
    except KeyError:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use parquet, csv, tsv, json or jsonl") from None
    return reader(path)


def read_table(source: str, *, split: str = "train", subset: str | None = None) -> pd.DataFrame:
    """Read ``source`` as a DataFrame: a local path if it exists, else a hub dataset id."""
    if Path(source).exists():
        return read_local(source)
    if source.startswith((".", "/", "~")) or source.endswith((".parquet", ".csv", ".json", ".jsonl", ".tsv")):
        raise FileNotFoundError(f"dataset source {source!r} does not exist (and does not look like a hub id)")
    import datasets  # heavy; only needed for hub ids

    return datasets.load_dataset(source, subset, split=split).to_pandas()


def require_columns(df: pd.DataFrame, columns: list[str], *, source: str) -> None:
    """Fail with a message naming the missing columns and the ones present."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; found {list(df.columns)}")
