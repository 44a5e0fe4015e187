"""Atomic file output: write to a temporary sibling, then rename into place.

A crash, a SLURM preemption or a failed validation never leaves a half-written output behind:
the final path either holds the complete result or does not exist.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from mialab.core.integrity import record_outputs

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read from ``/proc/self/status`` without changing it.

    Elsewhere it is read with ``os.umask`` twice (set, restore) under a lock: a file another
    thread creates in between gets the interim mask.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def grant_umask_mode(path: str | os.PathLike) -> None:
    """Give a temporary file or folder the mode the umask allows a normally created one.

    ``mkstemp``/``mkdtemp`` create 0600/0700, which would make a moved-into-place output
    unreadable for the group on a shared filesystem. Inside a folder only what still has those
    modes (other temporaries) is changed; a mode set on purpose is kept.
    """
    mask = current_umask()
    file_mode, dir_mode = 0o666 & ~mask, 0o777 & ~mask
    path = Path(path)
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            for name, temp_mode, mode in [*((d, 0o700, dir_mode) for d in dirs),
                                          *((f, 0o600, file_mode) for f in files)]:
                st = os.lstat(os.path.join(root, name))
                if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) == temp_mode:
                    os.chmod(os.path.join(root, name), mode)
        os.chmod(path, dir_mode)
    else:
        os.chmod(path, file_mode)


def remove_stale_temporaries(*finals: str | os.PathLike) -> list[Path]:
    """Delete the temporary siblings a killed earlier attempt left next to each of ``finals``.

    Those are :func:`atomic_path`'s and :func:`atomic_directory`'s ``.<name>.<random>.tmp`` and
    ``.<name>.old``; call it at the start of the job that owns ``finals`` (never from a writer that
    several jobs may run at once, where it would delete another job's temporary). Returns what
    was removed.
    """
    removed = []
    for final in map(Path, finals):
        if not final.parent.is_dir():
            continue
        stale = re.compile(rf"\.{re.escape(final.name)}\.(\w+\.tmp|old)")
        for p in final.parent.iterdir():
            if not stale.fullmatch(p.name):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p)
    return removed


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file path next to ``final``; rename it to ``final`` only on success."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        grant_umask_mode(tmp)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to ``final``; move it to ``final`` only on success.

    An existing ``final`` is replaced only after the new one is complete.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        grant_umask_mode(tmp)
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write ``df`` to parquet atomically (no index, deterministic bytes for equal frames)."""
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False, engine="pyarrow")


def write_json(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` as pretty, key-sorted JSON atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_manifest(manifest: dict, path: str | os.PathLike, outputs=()) -> None:
    """Write a stage's manifest, recording its finished ``outputs`` (files or folders) under
    ``outputs`` so a later dry run sees a changed or removed file (mialab.core.integrity.damaged).
    ``outputs`` may hold the manifest's own path (a rule's whole output list): it is left out."""
    others = [o for o in outputs if os.path.abspath(o) != os.path.abspath(path)]
    write_json({**manifest, "outputs": record_outputs(Path(path).parent, others)}, path)


def write_text(text: str, path: str | os.PathLike) -> None:
    """Write ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
