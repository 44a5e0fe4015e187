"""Where the repository's own files are (resources, prompt templates, schemas: one place for each), and the
user caches mialab keeps outside the working directory (docs/files.md)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESOURCES = REPO / "resources"
PROMPTS = RESOURCES / "prompts"
SCHEMA = REPO / "schemas" / "config.schema.yaml"


def user_cache(name: str, variable: str) -> Path:
    """A mialab cache folder: ``$<variable>`` when set (the folder itself), else ``$XDG_CACHE_HOME/mialab/<name>``
    (``~/.cache/mialab/<name>``); docs/files.md lists each."""
    if os.environ.get(variable):
        return Path(os.environ[variable]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "mialab" / name
