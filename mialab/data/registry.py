"""Registry of benchmark families: adding a dataset family is one small module plus its keys.

A family is a function ``load_pool(spec) -> pandas.DataFrame`` that reads the raw corpus named by
``spec`` (a dataset's ``pool`` section of the config: ``source`` is a local path, or a hub dataset
written ``{hub: org/name, ...}``) and returns every candidate it can build, in the split schema
(:mod:`mialab.data.schema`), with the family's own membership rule in ``label`` and its prefix
rule applied. Register it with ``@register_family("name")`` in a module under
``mialab/data/families/`` and declare its keys (types and defaults) under ``$defs/pools/<name>``
in ``schemas/config.schema.yaml``: that declaration is the only place a default is written, and
:func:`get_family` fills it in, so a family reads ``spec[key]`` directly.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import importlib
import pkgutil
from typing import Callable

import pandas as pd
import yaml

from mialab.core.paths import SCHEMA
from mialab.core.registry import Registry

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


@functools.cache
def config_schema() -> dict:
    """The workflow's config schema (``schemas/config.schema.yaml``), read by libyaml's safe loader where PyYAML
    has it: the same data as ``yaml.safe_load``'s, parsed in C (every Snakemake process and many jobs read it)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(SCHEMA.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (a safe loader)


def pool_keys(family: str) -> dict[str, dict]:
    """The keys family ``family`` accepts in its pool section, each with its schema."""
    pools = config_schema()["$defs"]["pools"]
    if family not in pools:
        raise KeyError(f"family {family!r} declares no pool keys: add $defs/pools/{family} to {SCHEMA}")
    return pools[family]["properties"]


def defaults_validator(schema: dict):
    """A JSON-schema (2020-12) validator of ``schema`` that fills in, as it validates, a copy of a key's
    ``default`` where the key is absent (the same rule as Snakemake's ``validate``)."""
    from jsonschema import Draft202012Validator, validators

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": set_defaults})(schema)


def with_defaults(family: str, spec: dict) -> dict:
    """A copy of pool ``spec`` validated against the family's declaration, defaults filled in."""
    root = config_schema()
    out = copy.deepcopy(spec)
    defaults_validator({"$defs": root["$defs"], "$ref": f"#/$defs/pools/{family}"}).validate(out)
    return out


def get_family(name: str) -> LoadPool:
    """The ``load_pool`` of family ``name``, called with the spec's defaults filled in; an unknown
    name fails with the list of known ones."""
    load = FAMILIES.get(name)
    pool_keys(name)
    return lambda spec: load(with_defaults(name, spec))


#: the exact repeats dropped while :func:`build_pool` runs a family (None outside it)
_DROPPED_REPEATS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("dropped_repeats", default=None)


def count_dropped_repeats(n: int) -> None:
    """A family dropped ``n`` exact repeats of a candidate, keeping one of each (counted by :func:`build_pool`)."""
    counts = _DROPPED_REPEATS.get()
    if counts is not None:
        counts.append(int(n))


def build_pool(spec: dict) -> tuple[pd.DataFrame, int]:
    """A dataset's pool (its ``pool`` section through :func:`get_family`) and how many exact repeats of a
    candidate the family dropped, so the pool's manifest can say it (not only the job's log)."""
    counts: list[int] = []
    token = _DROPPED_REPEATS.set(counts)
    try:
        pool = get_family(spec["family"])(spec)
    finally:
        _DROPPED_REPEATS.reset(token)
    return pool, sum(counts)
