"""The score columns a config's methods write, and the check of the columns the config names.

Every method declares its columns for a config (:class:`Columns`, from its own package: the passive
baselines in :mod:`mialab.scoring.baselines`, the others in their plans). ``rules/common.smk`` hands them
all to :func:`check_columns`, which fails before any job when ``evaluation.baseline`` or an
``evaluation.headline`` entry names a column no score table will hold: the headline would lose that row,
or every Δ and p-value, without a word. A headline column of a method the config does not run is left
out, as the schema says (the default headline names every method's). :func:`check_targets` does the same
for ``paper_targets``, the paper's figures a config lists beside its own: each must name a figure the run
computes, on the (model, dataset) pair whose score tables hold its columns (:func:`target_columns`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mialab.pipeline.config import ConfigError

SHOWN = 12  # columns a message lists
TOP5 = "top5_auroc"  # an attack's summary in its paper: the mean of its five best metric AUROCs per seed
TPR = re.compile(r"tpr@(?P<percent>[0-9]+(?:\.[0-9]+)?)%fpr")  # TPR at a FPR target, as the results tables name it


@dataclass(frozen=True)
class Columns:
    """The score columns of one method. ``pattern`` (a regular expression) matches each column the method
    writes under any config; ``written``: those this config's score tables hold (empty: the config does
    not run the method); ``key``: the config keys that decide them, for messages; ``pairs``: the
    (model, dataset) pairs whose score tables hold them."""

    method: str
    pattern: str
    written: tuple[str, ...]
    key: str
    pairs: tuple[tuple[str, str], ...]

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


def target_columns(target: dict, written) -> list[str]:
    """The score columns a ``paper_targets`` entry's figure reads: its ``method`` column for ``auroc`` and
    ``tpr@<t>%fpr``; for ``top5_auroc``, every column of the attack ``method`` among ``written`` (``<method>/...``);
    for a reconstruction metric ``<metric>@<aon|bon>``, the column ``<method>/<metric>@<agg>``."""
    method, metric = target["method"], target["metric"]
    if metric == "auroc" or TPR.fullmatch(metric):
        return [method]
    if metric == TOP5:
        return [c for c in written if c.startswith(method + "/")]
    return [f"{method}/{metric}"]


def check_targets(targets: list[dict], methods: list[Columns]) -> None:
    """Every ``paper_targets`` entry's figure is one the run computes: the columns it reads are columns the config's
    methods write (``top5_auroc``: five or more of its attack's), on the entry's (model, dataset)."""
    written = [c for m in methods for c in m.written]
    for i, t in enumerate(targets):
        where = f"paper_targets[{i}] ({t['method']} {t['metric']} on {t['dataset']} / {t['model']})"
        columns = target_columns(t, written)
        if t["metric"] == TOP5 and len(columns) < 5:
            attacks = sorted({c.split("/", 1)[0] for c in written if "/" in c})
            raise ConfigError(f"{where}: {TOP5} is the mean of an attack's five best metric AUROCs, and "
                              f"{t['method']!r} has {len(columns)} score column(s) in this config; its attacks: "
                              f"{', '.join(attacks)}")
        for column in columns:
            fault = column_fault(column, methods, required=True)
            if fault:
                raise ConfigError(f"{where}: {fault}; name a figure this config computes, or configure what writes it")
            owner = next(m for m in methods if column in m.written)
            if (t["model"], t["dataset"]) not in owner.pairs:
                raise ConfigError(f"{where}: {owner.method} writes {column!r} on "
                                  f"{', '.join(f'{d} / {m}' for m, d in owner.pairs)}, not on {t['dataset']} / "
                                  f"{t['model']}")
