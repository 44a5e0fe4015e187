"""Content identity of files: stage keys from content, and records that show a built output was damaged.

Two measures, for two purposes:

- :func:`content_digest` is the SHA-256 of a file's whole content. Keys use it (raw sources, a local
  ``kind: hf`` model folder's config, tokenizer and weight files): a key must change when any byte
  changes, e.g. weights swapped for others of the same shapes, which a safetensors header (dtypes,
  shapes, offsets) cannot show. Hashing gigabytes at every dry run is avoided by a cache keyed by
  (path, size, mtime_ns, inode) (:class:`HashCache`): the mtime only decides when to hash again, it is never
  part of a fingerprint; after a copy that resets mtimes a file is hashed once more.
- :func:`file_signature` is what a stage's manifest records about each output file and what the dry
  run compares (:func:`damaged`): the full hash of a small file; for a large one its size and the
  hash of its head (at least a safetensors file's whole tensor table) and tail. This reads kilobytes
  per file, so checking every output of a paper-scale run stays cheap; it catches a removed, truncated,
  regrown or rewritten file (retrained weights differ in their last tensor too), not an edit that
  keeps the size, the head and the tail.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import struct
import tempfile
from pathlib import Path
from typing import Iterable

SMALL_FILE = 4 << 20  # outputs up to this size are recorded by their full hash
EDGE = 64 << 10  # bytes read from each end of a larger file

# What identifies a local model folder: everything from_pretrained reads (config, generation config,
# tokenizer files, chat template, safetensors weights and their index), not READMEs or pickles.
MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".model", ".txt", ".jinja", ".tiktoken")


@functools.lru_cache(maxsize=None)
def _sha256(path: str, size: int, mtime_ns: int, inode: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class HashCache:
    """Full-content hashes kept in a JSON file, reused while a file's (size, mtime_ns, inode) is unchanged
    (the inode too: a file renamed over another within one clock tick keeps the old mtime).

    Entries are keyed by the path as given; a save merges with what other processes wrote and
    replaces the file atomically (a lost entry only costs hashing that file again).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.entries = self._read()

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def digest(self, path: str, st: os.stat_result) -> str:
        key, stamp = os.path.normpath(path), [st.st_size, st.st_mtime_ns, st.st_ino]
        hit = self.entries.get(key)
        if hit is not None and hit[:3] == stamp:
            return hit[3]
        digest = _sha256(os.path.realpath(path), *stamp)
        self.entries[key] = [*stamp, digest]
        self._save()
        return digest

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**self._read(), **self.entries}
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(merged, fh)
        os.replace(tmp, self.path)


def content_digest(path: str | os.PathLike, cache: HashCache | None = None) -> str:
    """SHA-256 of the file's content (hashed again only when its size, mtime or inode changed)."""
    st = os.stat(path)
    if cache is not None:
        return cache.digest(str(path), st)
    return _sha256(os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino)


def model_files(folder: str | os.PathLike) -> list[Path]:
    """The files of a local model folder that determine the loaded model (see MODEL_FILE_SUFFIXES)."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in MODEL_FILE_SUFFIXES)


def model_fingerprint(path: str, cache: HashCache | None = None) -> dict:
    """What identifies the model ``path`` names: a local folder's files by content, else the hub id.

    Relative file names only: the same weights give the same fingerprint wherever the folder lies.
    """
    if not os.path.isdir(path):
        return {"hub": path}
    files = model_files(path)
    if not files:
        raise FileNotFoundError(f"{path}: model folder holds no config, tokenizer or safetensors file")
    return {"files": {p.name: content_digest(p, cache) for p in files}}


def _head_length(fh, size: int) -> int:
    """EDGE bytes, or a safetensors file's 8-byte length and whole JSON tensor table if longer."""
    n = struct.unpack("<Q", fh.read(8))[0]
    is_safetensors = 8 + n <= size and fh.read(1) == b"{"
    fh.seek(0)
    return max(EDGE, 8 + n) if is_safetensors else EDGE


def file_signature(path: str | os.PathLike) -> dict:
    """Size and hash of a file: the full content when small, else its head and tail (cheap)."""
    size = os.path.getsize(path)
    if size <= SMALL_FILE:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return {"size": size, "sha256": h.hexdigest()}
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read(_head_length(fh, size)))
        fh.seek(size - EDGE)
        h.update(fh.read(EDGE))
    return {"size": size, "head_tail_sha256": h.hexdigest()}


def record_outputs(folder: str | os.PathLike, outputs: Iterable[str | os.PathLike]) -> dict:
    """``{path relative to folder: signature}`` of every file of ``outputs`` (folders walked)."""
    folder = Path(folder)
    record = {}
    for out in outputs:
        out = Path(out)
        files = sorted(p for p in out.rglob("*") if p.is_file()) if out.is_dir() else [out]
        for f in files:
            record[os.path.relpath(f, folder)] = file_signature(f)
    return record


def damaged(folder: str | os.PathLike) -> list[str]:
    """How the outputs of the stage in ``folder`` differ from what its ``manifest.json`` recorded.

    Empty when the folder has no manifest, or one without an ``outputs`` record (written before
    records existed), or when every recorded file is as recorded.
    """
    folder = Path(folder)
    try:
        record = json.loads((folder / "manifest.json").read_text()).get("outputs")
    except (OSError, ValueError):
        return []
    problems = []
    for rel, want in (record or {}).items():
        path = folder / rel
        if not path.is_file():
            problems.append(f"{rel} is missing")
        elif os.path.getsize(path) != want["size"]:
            problems.append(f"{rel} has changed size ({want['size']} -> {os.path.getsize(path)} bytes)")
        elif file_signature(path) != want:
            problems.append(f"{rel} has changed content")
    return problems


class DamagedOutputError(RuntimeError):
    """A built stage's outputs are no longer what its manifest recorded; the message says what to do."""


def check_stages(folders: Iterable[str]) -> None:
    """Fail, naming each folder and file, when a built stage among ``folders`` is damaged.

    Snakemake only sees that an output path exists, so without this a stage folder missing its
    weights counts as done and its consumers fail (or a forced rerun deletes their good outputs).
    """
    lines = []
    for folder in dict.fromkeys(folders):
        problems = damaged(folder)
        if problems:
            lines.append(f"  {folder}: {'; '.join(problems)} (since its manifest.json was written); "
                         f"delete the folder (rm -r {shlex.quote(folder)}) and the next run rebuilds it "
                         f"and what depends on it")
    if lines:
        raise DamagedOutputError("built outputs changed or removed after they were recorded:\n" + "\n".join(lines))
