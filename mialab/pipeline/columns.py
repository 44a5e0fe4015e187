"""The score columns a config's methods write, and the check of the columns the config names.

Every method declares its columns for a config (:class:`Columns`, from its own package: the passive
baselines in :mod:`mialab.scoring.baselines`, the others in their plans). ``rules/common.smk`` hands them
all to :func:`check_columns`, which fails before any job when ``evaluation.baseline`` or an
``evaluation.headline`` entry names a column no score table will hold: the headline would lose that row,
or every Δ and p-value, without a word. A headline column of a method the config does not run is left
out, as the schema says (the default headline names every method's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mialab.pipeline.config import ConfigError

SHOWN = 12  # columns a message lists


@dataclass(frozen=True)
class Columns:
    """The score columns of one method. ``pattern`` (a regular expression) matches each column the method
    writes under any config; ``written``: those this config's score tables hold (empty: the config does
    not run the method); ``key``: the config keys that decide them, for messages."""

    method: str
    pattern: str
    written: tuple[str, ...]
    key: str

    def owns(self, column: str) -> bool:
        return re.fullmatch(self.pattern, column) is not None


def listed(columns) -> str:
    """Columns as a message lists them (the first :data:`SHOWN`)."""
    columns = list(columns)
    more = f", ... ({len(columns)} in all)" if len(columns) > SHOWN else ""
    return ", ".join(columns[:SHOWN]) + more


def column_fault(column: str, methods: list[Columns], *, required: bool) -> str | None:
    """Why no score table of the config holds ``column``; None when one does, or (unless ``required``)
    when its method is one the config does not run."""
    if any(column in m.written for m in methods):
        return None
    owners = [m for m in methods if m.owns(column)]
    running = [m for m in owners if m.written]
    if running:
        m = running[0]
        return f"{column!r} is not among the columns {m.method} writes under {m.key}: {listed(m.written)}"
    if owners:
        return (f"{column!r} is a column of {owners[0].method}, which this config does not run ({owners[0].key})"
                if required else None)
    return (f"{column!r} is not a score column of any method; the methods' columns: "
            + "; ".join(f"{m.method}: {listed(m.written)}" for m in methods if m.written))


def check_columns(evaluation: dict, methods: list[Columns]) -> None:
    """``evaluation.baseline`` is a column a score table of the config holds; every ``evaluation.headline``
    column is one, or one of a method the config does not run (that row is left out)."""
    fault = column_fault(evaluation["baseline"], methods, required=True)
    if fault:
        raise ConfigError(f"evaluation.baseline: {fault}; every headline row is tested against it: name a "
                          "column this config writes, or configure what writes it")
    for family, column in evaluation["headline"].items():
        fault = column_fault(column, methods, required=False)
        if fault:
            raise ConfigError(f"evaluation.headline.{family}: {fault}; the row would be left out of the headline: "
                              "name a column the config writes, or configure what writes it")
