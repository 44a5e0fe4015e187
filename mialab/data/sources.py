"""Read a raw corpus: a local file or folder, a hub dataset, or a file fetched from a URL.

In the config a source is a local path when written as a plain string, and otherwise a mapping that says
its kind: ``{hub: org/name}`` a hub dataset (with ``revision``, ``split``, ``subset``), ``{url: ..., sha256:
...}`` a file at a URL and ``{github: owner/name, commit: ..., path: ..., sha256: ...}`` a file of a public
GitHub repository at a commit. Nothing is guessed from a string, so a mistyped path fails as a missing path
(before any job, in :func:`mialab.pipeline.config.check_config`) instead of as an unreachable hub id.

Nothing here downloads. Rule ``prefetch`` (:mod:`mialab.pipeline.prefetch`) fetches hub datasets into the
hub cache (``HF_HOME``) and files into :func:`data_cache`, each file under its ``sha256`` (checked after the
download); the jobs read them from there offline: a hub dataset from its cached snapshot at its revision
(``datasets.load_dataset`` of that folder), a file from :func:`cached_file`. Read errors name the file and,
where it applies, the row, column or byte offset.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pyarrow

from mialab.core.paths import user_cache

FORMATS = ("parquet, csv, tsv, json (an array of row objects) or jsonl (one row object, or one string, "
           "per line)")

_READERS = {
    ".parquet": pd.read_parquet,
    ".csv": lambda p: pd.read_csv(io.StringIO(read_text(p))),
    ".tsv": lambda p: pd.read_csv(io.StringIO(read_text(p)), sep="\t"),
}


#: where a ``{github: ...}`` file is fetched from (``MIALAB_GITHUB_RAW`` overrides it, e.g. a mirror)
GITHUB_RAW = "https://raw.githubusercontent.com"


def is_hub(source) -> bool:
    """Whether a config source is a hub dataset (``{hub: org/name, ...}``)."""
    return isinstance(source, dict) and "hub" in source


def is_file(source) -> bool:
    """Whether a config source is a fetched file (``{url: ...}`` or ``{github: ...}``, each with its sha256)."""
    return isinstance(source, dict) and ("url" in source or "github" in source)


def describe(source) -> str:
    """A source as messages name it: the path, ``hub dataset org/name (split s)`` or ``file <url>``."""
    if is_file(source):
        return f"file {file_url(source, base=GITHUB_RAW)}"
    if not is_hub(source):
        return str(source)
    extra = ", ".join(f"{k} {source[k]}" for k in ("subset", "split", "revision") if source.get(k))
    return f"hub dataset {source['hub']}" + (f" ({extra})" if extra else "")


def local_paths(source) -> list[str]:
    """The local paths a config source names (a path, ``{source, year}``, or a list of them)."""
    if isinstance(source, list):
        return [p for s in source for p in local_paths(s)]
    if isinstance(source, dict):
        return [] if is_hub(source) or is_file(source) else local_paths(source["source"])
    return [source]


def file_url(source: dict, base: str | None = None) -> str:
    """Where a file source is fetched from: its ``url``, or the raw file of ``github`` at ``commit``
    (under ``base``, default ``$MIALAB_GITHUB_RAW`` or :data:`GITHUB_RAW`)."""
    if "url" in source:
        return source["url"]
    base = (base or os.environ.get("MIALAB_GITHUB_RAW") or GITHUB_RAW).rstrip("/")
    return f"{base}/{source['github']}/{source['commit']}/{source['path']}"


def data_cache() -> Path:
    """Where fetched files live: ``$MIALAB_DATA_CACHE``, else ``~/.cache/mialab/data`` (docs/files.md)."""
    return user_cache("data", "MIALAB_DATA_CACHE")


def cached_file(source: dict) -> Path:
    """The cached copy of a file source: ``<data cache>/<sha256>/<its file name>`` (the name keeps its format)."""
    name = PurePosixPath(source["path"] if "github" in source else urlparse(source["url"]).path).name
    return data_cache() / source["sha256"] / name


def read_text(path: str | Path) -> str:
    """A file's text; bytes that are not UTF-8 are an error naming the file and the byte offset."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}: not UTF-8 text: byte offset {e.start} (line {line}) is "
                         f"{data[e.start:e.start + 1]!r}; re-encode the file as UTF-8") from None


def _read_json(path: Path) -> pd.DataFrame:
    text = read_text(path)
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            return pd.DataFrame(json.loads(text))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    rows, kind = [], None  # row objects, or bare strings (MIMIR): the first line's kind
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: line {n} is not a JSON value ({e.msg}): {_json_lines_fault(text, rows)}; "
                             f"accepted formats: {FORMATS}") from None
        kind = kind or (dict if isinstance(row, dict) else str)
        if not isinstance(row, kind):
            raise ValueError(f"{path}: line {n} holds {type(row).__name__} {line.strip()[:60]!r}, but the first line "
                             f"holds a {'row object' if kind is dict else 'string'}: a JSON-lines file holds one row "
                             "object, or one string, per line")
        rows.append(row)
    return pd.DataFrame({"text": rows}) if kind is str else pd.DataFrame(rows)


def _json_lines_fault(text: str, rows: list) -> str:
    """What is wrong with a JSON-lines file whose next line does not parse, after ``rows`` did."""
    if rows:
        return "a truncated or damaged line of a JSON-lines file (one value per line); repair or remove it"
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return "the file is not JSON lines"
    return "the file is a JSON object spread over several lines"


def read_local(path: str | Path) -> pd.DataFrame:
    """Read one local file (parquet, csv, tsv, json, jsonl) or every such file in a folder, concatenated."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (*_READERS, ".json", ".jsonl"))
        if not files:
            raise FileNotFoundError(f"{path}: folder holds no file of an accepted format ({FORMATS})")
        return pd.concat([read_local(f) for f in files], ignore_index=True)
    if path.suffix in (".json", ".jsonl"):
        return _read_json(path)
    try:
        reader = _READERS[path.suffix]
    except KeyError:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; accepted formats: {FORMATS}") from None
    try:
        return reader(path)
    except (pyarrow.ArrowException, pd.errors.ParserError, pd.errors.EmptyDataError) as e:  # the parsers' own
        raise ValueError(f"{path}: not a readable {path.suffix[1:]} file ({type(e).__name__}: {e}); a truncated "
                         "or damaged copy? Copy it again") from None


def hub_offline() -> bool:
    """Whether the hub is switched off for this process (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


#: what a job that finds a source missing from its cache is told to run
FETCH_HINT = ("fetch it where the network is reachable, with the same HF_HOME and MIALAB_DATA_CACHE: snakemake "
              "prefetch <your --profile and --configfile arguments> (docs/slurm.md, \"Staging\")")


def hub_snapshot(source: dict) -> str:
    """The folder of hub dataset ``source`` at its ``revision`` in the hub cache (huggingface_hub's
    ``snapshot_download``: offline, under ``HF_HUB_OFFLINE``, only what the cache holds)."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(source["hub"], repo_type="dataset", revision=source.get("revision"))
    except Exception as e:
        if not hub_offline():
            raise
        raise RuntimeError(f"{describe(source)}: not in the local hub cache, and HF_HUB_OFFLINE is set, so nothing "
                           f"is downloaded ({type(e).__name__}: {e}); {FETCH_HINT}") from e


def load_hub(source: dict, *, subset: str | None = None):
    """Hub dataset ``source`` (``subset`` overrides its own) as a ``datasets.Dataset``, read from its cached
    snapshot (:func:`hub_snapshot`); without a ``split`` its only split."""
    import datasets  # heavy; only needed for hub datasets

    split, subset = source.get("split"), subset or source.get("subset")
    data = datasets.load_dataset(hub_snapshot(source), subset, split=split)
    if split is None:
        if len(data) != 1:
            raise ValueError(f"{describe(source)} has splits {list(data)}; name one with `split:`")
        data = next(iter(data.values()))
    return data


def read_hub(source: dict, *, subset: str | None = None) -> pd.DataFrame:
    """Read hub dataset ``source`` (:func:`load_hub`) as a frame."""
    return load_hub(source, subset=subset).to_pandas()


def read_table(source: str | dict, *, subset: str | None = None) -> pd.DataFrame:
    """Read config source ``source``: a local path (which must exist), a hub dataset or a fetched file."""
    if is_hub(source):
        return read_hub(source, subset=subset)
    if is_file(source):
        path = cached_file(source)
        if not path.is_file():
            raise FileNotFoundError(f"{describe(source)}: not in the data cache ({path}); {FETCH_HINT}")
        return read_local(path)
    if not Path(source).exists():
        raise FileNotFoundError(f"{source}: no such file or folder (a hub dataset is written {{hub: org/name}})")
    return read_local(source)


# a column, or a value inside one: ``prompt[-1].content`` (a list's item, a mapping's key); never evaluated
COLUMN_PATH = re.compile(r"^[^.\[\]]+(?:\.[^.\[\]]+|\[-?\d+\])*$")
_STEP = re.compile(r"\.([^.\[\]]+)|\[(-?\d+)\]")


def column_values(df: pd.DataFrame, path: str, *, source) -> pd.Series:
    """The values of column ``path`` of ``df``: a column's name, or a path into its cells, ``name`` then
    ``.key`` (a mapping's value) and ``[i]`` (a list's item) steps, e.g. ``prompt[-1].content`` (the last
    chat turn's text, as the LaRA code reads a prompt) or ``reward_model.ground_truth``. A column named
    exactly ``path`` wins. A cell the path does not reach is an error naming the source, the path and the row."""
    if path in df.columns:
        return df[path]
    if not COLUMN_PATH.match(path):
        raise ValueError(f"{describe(source)}: column {path!r} is not a column name nor a path such as "
                         "prompt[-1].content")
    root = re.split(r"[.\[]", path, maxsplit=1)[0]
    require_columns(df, [root], source=source)
    steps = [(key or None, None if key else int(index)) for key, index in _STEP.findall(path[len(root):])]

    def walk(row: int, value):
        for key, index in steps:
            try:
                if not isinstance(value, dict if key is not None else (list, tuple, np.ndarray)):
                    raise TypeError
                value = value[key] if key is not None else value[index]
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"{describe(source)}: column {path!r}, row {row}: the cell has no "
                                 f"{key if key is not None else f'item {index}'} ({type(value).__name__} "
                                 f"{str(value)[:80]!r})") from None
        return value

    return pd.Series([walk(i, v) for i, v in enumerate(df[root])], index=df.index, name=path)


def require_columns(df: pd.DataFrame, columns: list[str], *, source) -> None:
    """Fail with a message naming the missing columns and the ones present."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{describe(source)}: missing column(s) {missing}; found {list(df.columns)}")


def require_text(df: pd.DataFrame, columns: list[str], *, source) -> None:
    """Every cell of ``columns`` must be a string: a missing or non-text cell is an error naming
    its row (0-based, in file order) and column."""
    for col in columns:
        require_cells(df, col, lambda v: isinstance(v, str), "instead of text", source=source)


def require_labels(df: pd.DataFrame, column: str, *, source) -> pd.Series:
    """``df[column]`` as int8 membership labels. Every cell must be 1 (member) or 0 (non-member): an
    integer, a boolean or a float equal to one; any other value, a missing one included, is an error
    (:func:`require_cells`), never cast to a label: it would corrupt the ground truth."""
    def is_label(v) -> bool:
        return isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, float, np.integer, np.floating)) and v in (0, 1))

    require_cells(df, column, is_label, "is not a membership label; labels are 1 (member) or 0 (non-member)",
                  source=source)
    return df[column].astype("int8")


def require_cells(df: pd.DataFrame, column: str, ok, problem: str, *, source) -> None:
    """Fail when ``ok`` is false for a cell of ``column``, naming the source, the column, the first such
    row (0-based, in file order), its value (or that it is missing), ``problem`` and how many rows fail."""
    bad = ~df[column].map(ok).to_numpy(dtype=bool)
    if bad.any():
        row = int(bad.argmax())
        value = df[column].iloc[row]
        value = value.item() if isinstance(value, np.generic) else value  # numpy's scalars as Python's
        what = "missing" if value is None or (isinstance(value, float) and value != value) else \
            f"{type(value).__name__} {value!r}"
        raise ValueError(f"{describe(source)}: column {column!r}, row {row}: {what} {problem} "
                         f"({int(bad.sum())} such row(s))")
