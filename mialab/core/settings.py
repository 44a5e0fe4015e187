"""Settings dataclasses built from a validated config block: one rule for unknown keys."""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


def settings_from(cls: type[T], spec: dict, what: str) -> T:
    """``cls(**spec)``; a key that is not a field of ``cls`` is an error naming it and the known ones."""
    known = sorted(f.name for f in fields(cls))
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise KeyError(f"unknown {what} setting(s) {unknown}; known: {', '.join(known)}")
    return cls(**spec)
