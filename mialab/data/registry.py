"""Registry of benchmark families: adding a dataset family is one small module.

A family is a function ``load_pool(spec) -> pandas.DataFrame`` that reads the raw corpus named by
``spec`` (a dataset's ``pool`` section of the config: ``source`` is a local path or a hub id)
and returns every candidate it can build, in the split schema (:mod:`mialab.data.schema`),
with the family's own membership rule in ``label`` and its prefix rule applied.
Register it with ``@register_family("name")`` in a module under ``mialab/data/families/``.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

import pandas as pd

LoadPool = Callable[[dict], pd.DataFrame]

_FAMILIES: dict[str, LoadPool] = {}


def register_family(name: str) -> Callable[[LoadPool], LoadPool]:
    """Decorator: make ``load_pool`` available to the config as ``family: name``."""

    def deco(fn: LoadPool) -> LoadPool:
        if name in _FAMILIES and _FAMILIES[name] is not fn:
            raise ValueError(f"dataset family {name!r} registered twice")
        _FAMILIES[name] = fn
        return fn

    return deco


def _import_all() -> None:
    from mialab.data import families

    for mod in pkgutil.iter_modules(families.__path__):
        importlib.import_module(f"{families.__name__}.{mod.name}")


def known_families() -> list[str]:
    """Names of every registered family, sorted."""
    _import_all()
    return sorted(_FAMILIES)


def get_family(name: str) -> LoadPool:
    """The ``load_pool`` of family ``name``; an unknown name fails with the list of known ones."""
    _import_all()
    try:
        return _FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown dataset family {name!r}; known families: {', '.join(sorted(_FAMILIES))}") from None
