"""The README's results section, regenerated from a finished run (``scripts/readme_results.py``): the
headline table between two marker comments of README.md; and the exposure sweep's onsets (docs/sweep.md)."""

from __future__ import annotations

import re

import pandas as pd

BEGIN, END = "<!-- results:begin (scripts/readme_results.py) -->", "<!-- results:end -->"


def compact_headline(table: pd.DataFrame, fpr_targets: list[float]) -> str:
    """The headline table, one line per (dataset, model, family): AUROC with its interval, TPR at
    each FPR target, Δ AUROC against the baseline with its paired p-value, non-members per seed."""
    from mialab.evaluation.metrics import fpr_column

    tprs = [fpr_column(t) for t in fpr_targets]
    head = ["dataset / model", "method", "AUROC [95% CI]", *tprs, "Δ vs baseline (p)", "n_neg"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in table.iterrows():
        own = r["method"] == r.get("baseline")
        if own or pd.isna(r.get("delta_auroc")):
            delta = "baseline" if own else "–"
        else:
            p = "<0.001" if r["p_value"] < 0.001 else f"{r['p_value']:.3f}"
            delta = f"{100 * r['delta_auroc']:+.1f} ({p})"
        cells = [f"{r['dataset']} / {r['model']}", r["family"],
                 f"{100 * r['auroc']:.1f} [{100 * r['auroc_lo']:.1f}, {100 * r['auroc_hi']:.1f}]",
                 *(f"{100 * r[c]:.1f}" for c in tprs), delta, str(int(r["n_neg"]))]
        lines.append("| " + " | ".join(cells) + " |")
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


def results_section(headline: pd.DataFrame, fpr_targets: list[float], baseline: str) -> str:
    """The markdown between the README's markers: the headline table of the default tiny world."""
    text = [BEGIN, "",
            f"Headline of the default tiny world (`results/evaluation/summary.md` has every method and ablation): "
            f"AUROC with its 95% bootstrap interval over the distinct candidates of the 3 seeds (members and non-members resampled apart), TPR at low "
            f"FPR (with 48–64 non-members per seed, TPR@1%FPR allows no false positive), and the paired bootstrap "
            f"test against `{baseline}` on the same candidates.", "", compact_headline(headline, fpr_targets)]
    return "\n".join(text + [END])


def replace_section(readme: str, section: str) -> str:
    """``readme`` with the text between the markers (markers included) replaced by ``section``; an
    error when the markers are missing (the script never guesses where the section goes)."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise ValueError(f"README has no results section: add the two lines {BEGIN!r} and {END!r} where it goes")
    return pattern.sub(lambda _: section, readme, count=1)
