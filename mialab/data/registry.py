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

from mialab.registry import Registry

LoadPool = Callable[[dict], pd.DataFrame]

def _import_all() -> None:
    from mialab.data import families

    for mod in pkgutil.iter_modules(families.__path__):
        importlib.import_module(f"{families.__name__}.{mod.name}")


FAMILIES: Registry[LoadPool] = Registry("dataset family", load=_import_all, plural="families")
#: Decorator: make ``load_pool`` available to the config as ``family: name``.
register_family = FAMILIES.register
#: Names of every registered family, sorted.
known_families = FAMILIES.known
#: The ``load_pool`` of a family; an unknown name fails with the list of known ones.
get_family = FAMILIES.get
