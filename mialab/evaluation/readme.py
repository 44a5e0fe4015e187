"""The README's results section, regenerated from a finished run (``scripts/readme_results.py``): the
headline table between two marker comments of README.md; and the exposure sweep's onsets (docs/sweep.md)."""

from __future__ import annotations

import re

import pandas as pd

BEGIN, END = "<!-- results:begin (scripts/readme_results.py) -->", "<!-- results:end -->"


def headline_grid(table: pd.DataFrame, alpha: float = 0.05) -> str:
    """The headline table as a grid: a line per (dataset, model), a column per method family (in the headline's
    order), each cell the AUROC with its interval, marked ▲ / ▼ where the paired test puts it above / below the
    baseline at ``alpha`` (the baseline's own cell: "(baseline)"). TPRs, Δ and p-values: summary.md."""
    families = list(dict.fromkeys(table["family"]))
    head = ["dataset / model", *families]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(families)]
    for (dataset, model), rows in table.groupby(["dataset", "model"], sort=False):
        cells = dict.fromkeys(families, "")
        for _, r in rows.iterrows():
            mark = ""
            if r["method"] == r.get("baseline"):
                mark = " (baseline)"
            elif not pd.isna(r.get("delta_auroc")) and r["p_value"] < alpha:
                mark = " ▲" if r["delta_auroc"] > 0 else " ▼"
            cells[r["family"]] = f"{100 * r['auroc']:.1f} [{100 * r['auroc_lo']:.0f}, {100 * r['auroc_hi']:.0f}]{mark}"
        lines.append("| " + " | ".join([f"{dataset} / {model}", *cells.values()]) + " |")
    return "\n".join(lines) + "\n"


def sweep_onsets(table: pd.DataFrame) -> str:
    """The exposure sweep in one line per (dataset, model, family): AUROC at r = 0 and at the largest
    r with their intervals, the first r whose interval lies above chance, the r where it beats the baseline."""
    from mialab.evaluation.sweep import onset

    top = int(table["r"].max())
    at = table.set_index(["dataset", "model", "family", "r"])
    cell = lambda key, r: (f"{100 * at.loc[(*key, r), 'auroc']:.1f} [{100 * at.loc[(*key, r), 'auroc_lo']:.0f}, "
                           f"{100 * at.loc[(*key, r), 'auroc_hi']:.0f}]" if (*key, r) in at.index else "")
    lines = ["| dataset / model | method | AUROC at r=0 | AUROC at r=" + str(top) + " | onset | beats baseline at r |",
             "|---|---|---|---|---|---|"]
    for _, o in onset(table).iterrows():
        key = (o["dataset"], o["model"], o["family"])
        first = "–" if o["first_r_above_chance"] is None or pd.isna(o["first_r_above_chance"]) else str(int(o["first_r_above_chance"]))
        lines.append(f"| {o['dataset']} / {o['model']} | {o['family']} | {cell(key, 0)} | {cell(key, top)} | {first} | "
                     f"{', '.join(map(str, o['beats_baseline_at'])) or '–'} |")
    return "\n".join(lines) + "\n"


def results_section(headline: pd.DataFrame, fpr_targets: list[float], baseline: str, seeds: int) -> str:
    """The markdown between the README's markers: the headline of the default tiny world (``seeds`` seeds) as a grid."""
    text = [BEGIN, "",
            f"Headline of the default tiny world: AUROC (%) with its 95% bootstrap interval over the distinct "
            f"candidates of the {seeds} seeds (members and non-members resampled apart); ▲ / ▼: the paired bootstrap test "
            f"on the same candidates puts it above / below `{baseline}` (p < 0.05). `results/evaluation/summary.md` "
            f"has the TPR at {', '.join(f'{100 * t:g}%' for t in fpr_targets)} FPR, Δ and p of every row, and every "
            f"method and ablation; an empty cell: a method the tiny world does not run on that model.", "",
            headline_grid(headline)]
    return "\n".join(text + [END])


def replace_section(readme: str, section: str) -> str:
    """``readme`` with the text between the markers (markers included) replaced by ``section``; an
    error when the markers are missing (the script never guesses where the section goes)."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise ValueError(f"README has no results section: add the two lines {BEGIN!r} and {END!r} where it goes")
    return pattern.sub(lambda _: section, readme, count=1)
