"""The README's results section, regenerated from a finished run (``scripts/readme_results.py``):
the headline table and the exposure sweep's figure, between two marker comments of README.md."""

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


def results_section(headline: pd.DataFrame, fpr_targets: list[float], baseline: str, sweep_figure: str | None) -> str:
    """The markdown between the markers."""
    text = [BEGIN, "",
            f"Headline of the default tiny world (`results/evaluation/summary.md` has every method and ablation): "
            f"AUROC with its 95% bootstrap interval over the distinct candidates of the 3 seeds (members and non-members resampled apart), TPR at low "
            f"FPR (with 48–64 non-members per seed, TPR@1%FPR allows no false positive), and the paired bootstrap "
            f"test against `{baseline}` on the same candidates.", "", compact_headline(headline, fpr_targets)]
    if sweep_figure:
        text += [f"Exposure sweep (`configs/sweep_exposure.yaml`): AUROC against how often the members were seen; "
                 f"r = 0 is the no-members control.", "", f"![exposure sweep]({sweep_figure})", ""]
    return "\n".join(text + [END])


def replace_section(readme: str, section: str) -> str:
    """``readme`` with the text between the markers (markers included) replaced by ``section``; an
    error when the markers are missing (the script never guesses where the section goes)."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise ValueError(f"README has no results section: add the two lines {BEGIN!r} and {END!r} where it goes")
    return pattern.sub(lambda _: section, readme, count=1)
