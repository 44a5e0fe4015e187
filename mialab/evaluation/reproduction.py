"""The paper's figures a config lists (``paper_targets``) beside this run's: the Reproduction tables.

Each target names a figure (:func:`mialab.pipeline.columns.target_columns`): the AUROC or TPR@FPR of a score
column, an attack's top-5 AUROC (the ADRA paper's summary: the mean of its five best metric AUROCs per seed), or a
reconstruction metric's mean over the members (the ADRA paper's reconstruction tables). The run's figure is the
mean over seeds, as in the results table, with its percentile bootstrap interval over the draws the headline uses
(:mod:`mialab.evaluation.bootstrap`: the distinct candidates resampled, members and non-members apart), so a
figure here equals the same figure in any other table of the run. The paper's value is printed beside it, never
read by a computation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mialab.evaluation import bootstrap as bs
from mialab.pipeline.columns import TOP5, TPR, target_columns

LOST = "not in the extracted text"  # a target's value where the papers' extracted text lost the figure
COUNTS = ("lcs_length",)  # reconstruction metrics the ADRA paper prints as counts (words), not percentages
ROW_COLUMNS = {"dataset": str, "model": str, "method": str, "metric": str, "unit": str, "paper": float, "run": float,
               "run_lo": float, "run_hi": float, "n_seeds": int, "source": str}  # a row's columns and their types


def unit(metric: str) -> str:
    """How a metric is printed: ``words`` (a count), else ``%``."""
    return "words" if metric.split("@")[0] in COUNTS else "%"


def _groups(tables: list[tuple[str, str, int, pd.DataFrame]]) -> dict[tuple[str, str], list[pd.DataFrame]]:
    """The merged score tables of each (dataset, model), seeds in order."""
    groups: dict[tuple[str, str], list[pd.DataFrame]] = {}
    for model, dataset, _, df in sorted(tables, key=lambda t: t[2]):
        groups.setdefault((dataset, model), []).append(df)
    return groups


def computable(targets: list[dict], tables: list[tuple[str, str, int, pd.DataFrame]]) -> list[dict]:
    """The targets whose figure ``tables`` hold: their (dataset, model)'s tables, with every column it reads."""
    groups = _groups(tables)
    out = []
    for t in targets:
        seeds = groups.get((t["dataset"], t["model"]))
        columns = target_columns(t, seeds[0].columns) if seeds else []
        if columns and all(c in s.columns for s in seeds for c in columns):
            out.append(t)
    return out


def figure_draws(target: dict, seeds: list[pd.DataFrame], draws: bs.Draws) -> np.ndarray:
    """A target's figure (a fraction, or a count) in every draw of one (dataset, model)'s seeds."""
    metric = target["metric"]
    columns = target_columns(target, seeds[0].columns)
    missing = sorted({c for s in seeds for c in columns if c not in s.columns})
    missing = missing if columns else [f"{target['method']}/..."]
    if missing:
        raise ValueError(f"{target['method']} {metric} on {target['dataset']} / {target['model']}: no column "
                         f"{', '.join(missing)} in the score tables")
    if metric == TOP5:
        return bs.top_k_draws([[s[c].to_numpy() for c in columns] for s in seeds], draws)
    values = [s[columns[0]].to_numpy() for s in seeds]
    if metric == "auroc":
        return bs.metric_draws(values, draws, "auroc")
    tpr = TPR.fullmatch(metric)
    if tpr:
        return bs.metric_draws(values, draws, float(tpr["percent"]) / 100)
    return bs.member_mean_draws(values, draws)


def reproduction_rows(targets: list[dict], tables: list[tuple[str, str, int, pd.DataFrame]], spec: dict
                      ) -> pd.DataFrame:
    """One row per target (in their order) from merged ``(model, dataset, seed, scores)`` tables holding every
    target's figure (:func:`computable`): the paper's value (NaN where the text lost it) and the run's figure with
    its interval at ``spec["level"]`` (``spec``: ``evaluation.bootstrap``), both in the metric's unit."""
    groups = _groups(tables)
    draws: dict[tuple[str, str], tuple[bs.Draws, bs.Draws]] = {}
    rows = []
    for t in targets:
        pair = (t["dataset"], t["model"])
        seeds = groups[pair]
        if pair not in draws:
            labels = [s["label"].to_numpy() for s in seeds]
            draws[pair] = (bs.identity(labels),
                           bs.draw([s["id"].to_numpy() for s in seeds], labels, spec["resamples"], spec["seed"]))
        point, resampled = draws[pair]
        scale = 1.0 if unit(t["metric"]) == "words" else 100.0
        lo, hi = bs.interval(figure_draws(t, seeds, resampled), spec["level"])
        src = t["source"]
        rows.append({"dataset": t["dataset"], "model": t["model"], "method": t["method"], "metric": t["metric"],
                     "unit": unit(t["metric"]), "paper": np.nan if t["value"] == LOST else float(t["value"]),
                     "run": scale * float(figure_draws(t, seeds, point)[0]), "run_lo": scale * lo,
                     "run_hi": scale * hi, "n_seeds": len(seeds),
                     "source": f"{src['paper']} {src['table']}, {src['row']}"})
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS)).astype(ROW_COLUMNS)


def _position(r) -> str:
    """Where the paper's figure falls against the run's interval."""
    if pd.isna(r["paper"]):
        return "–"
    if r["paper"] > r["run_hi"]:
        return f"{r['paper'] - r['run_hi']:.1f} above"
    if r["paper"] < r["run_lo"]:
        return f"{r['run_lo'] - r['paper']:.1f} below"
    return "inside"


def reproduction_markdown(rows: pd.DataFrame, level: float) -> str:
    """The Reproduction table: per target, the paper's figure and the run's with its interval, the difference and
    where the paper's figure falls (inside the interval, or how far above / below it)."""
    if rows.empty:
        return "This config lists no paper figure (`paper_targets`).\n"
    ci = f"{level:.0%} CI"
    head = ["dataset / model", "method", "metric", "paper", f"run [{ci}]", "run − paper", f"paper vs the run's {ci}",
            "seeds", "source"]
    lines = [f"The paper's figures this config lists (`paper_targets`), beside this run's: the mean over seeds with "
             f"its {level:.0%} bootstrap interval (the headline's draws), the difference and where the paper's figure "
             f"falls (inside the interval, or how far above or below it). In %, but `lcs_length` in words; "
             f"`{TOP5}`: the mean of the attack's five best metric AUROCs per seed (picked on the labels, as the "
             f"paper's summary); `<metric>@<aon|bon>`: the members' mean of the attack's reconstruction column. "
             f"\"{LOST}\": the papers' extracted text lost that figure. A CPU rehearsal's stand-in models are not "
             f"expected to come near the paper.\n",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in rows.iterrows():
        lost = pd.isna(r["paper"])
        lines.append("| " + " | ".join([
            f"{r['dataset']} / {r['model']}", f"`{r['method']}`", f"`{r['metric']}`",
            LOST if lost else f"{r['paper']:.1f}", f"{r['run']:.1f} [{r['run_lo']:.1f}, {r['run_hi']:.1f}]",
            "–" if lost else f"{r['run'] - r['paper']:+.1f}", _position(r), str(int(r["n_seeds"])), r["source"],
        ]) + " |")
    return "\n".join(lines) + "\n"
