"""Human-facing outputs: the markdown results table, low-FPR ROC curves and the forest plot of AUROCs."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import roc_curve

from mialab.evaluation.headline import headline_markdown
from mialab.evaluation.metrics import fpr_column
from mialab.evaluation.reproduction import reproduction_markdown


def markdown_table(summary: pd.DataFrame, metrics: list[str]) -> str:
    """Results as a markdown table, ``mean ± std`` per metric (in %); where any score table recorded
    truncation, a column ``truncated``: candidates cut to ``scoring.max_length`` / candidates, over seeds."""
    cut = "n_truncated" in summary.columns and summary["n_truncated"].notna().any()
    head = ["dataset", "model", "method", *metrics, "seeds", *(["truncated"] if cut else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in summary.iterrows():
        cells = [str(r["dataset"]), str(r["model"]), str(r["method"])]
        cells += [f"{100 * r[m + '_mean']:.1f} ± {100 * r[m + '_std']:.1f}" for m in metrics]
        cells.append(str(int(r["n_seeds"])))
        if cut:
            cells.append("" if pd.isna(r["n_truncated"]) else f"{int(r['n_truncated'])}/{int(r['n_total'])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def truncation_warnings(summary: pd.DataFrame, threshold: float) -> list[str]:
    """One line per (dataset, model) whose scored texts were cut to ``scoring.max_length`` more often
    than ``threshold`` (``scoring.truncation_warn``)."""
    if "n_truncated" not in summary.columns:
        return []
    rows = summary.dropna(subset=["n_truncated"]).drop_duplicates(["dataset", "model"])
    return [f"{r['dataset']} / {r['model']}: {int(r['n_truncated'])} of {int(r['n_total'])} candidates (over seeds) "
            f"are longer than scoring.max_length and were scored on their first tokens only; the methods with a "
            f"'truncated' count are affected (scoring.truncation: sliding_window scores every token)"
            for _, r in rows.iterrows() if r["n_truncated"] > threshold * r["n_total"]]


def off_chance_controls(headline: pd.DataFrame, controls: list[str]) -> pd.DataFrame:
    """The headline rows of the no-members controls (``controls``: models no member reached,
    :func:`mialab.pipeline.plan.no_member_models`) whose AUROC interval excludes 50%: such a model cannot
    know membership, so separating the classes says they differ otherwise (a distribution shift)."""
    if headline.empty:
        return pd.DataFrame(columns=["dataset", "model", "family", "method", "auroc", "auroc_lo", "auroc_hi"])
    rows = headline[headline["model"].isin(controls)]
    return rows[(rows["auroc_lo"] > 0.5) | (rows["auroc_hi"] < 0.5)]


def _auroc(r) -> str:
    return f"{r.family} (`{r.method}`) {100 * r.auroc:.1f} [{100 * r.auroc_lo:.1f}, {100 * r.auroc_hi:.1f}]"


def control_warnings(off: pd.DataFrame) -> list[str]:
    """One line per (dataset, control) of :func:`off_chance_controls`."""
    return [f"{dataset}: the no-members control {model!r} never saw a member, yet separates the classes: AUROC "
            + "; ".join(_auroc(r) for r in g.itertuples()) + f"; members and non-members of {dataset} differ "
            f"without membership (a distribution shift the blind baseline may miss), so read every attack's AUROC "
            f"on {dataset} against it"
            for (dataset, model), g in off.groupby(["dataset", "model"], sort=False)]


def split_checks_markdown(checks: pd.DataFrame, repeats: dict[str, int | None], off: pd.DataFrame) -> str:
    """The per-dataset split checks beside the results: the exact repeats its pool dropped (``repeats``; None
    where the pool's manifest predates the count), the most candidates two seeds' splits share, the leakage
    checks (:func:`mialab.checks.leakage.per_dataset`), and the no-members controls off 50% (``off``,
    :func:`off_chance_controls`)."""
    from mialab.checks.leakage import duplicate_counts, per_dataset

    head = ["dataset", "setting", "seeds", "exact repeats dropped", "most candidates two seeds share",
            "blind-baseline AUROC", "length AUROC", "cross-class duplicates exact / n-gram / embedding (sum over seeds)",
            "seeds flagged", "no-members control off 50%"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in per_dataset(checks).itertuples():
        dropped = repeats.get(r.dataset)
        controls = off[off["dataset"] == r.dataset]
        lines.append("| " + " | ".join([
            r.dataset, r.setting, str(r.n_seeds), "n/a" if dropped is None else str(dropped),
            f"{r.n_shared} / {r.n_candidates}" + (" ⚠" if r.overlap_warning else ""),
            f"{100 * r.blind_auroc_mean:.1f} ± {100 * r.blind_auroc_std:.1f}",
            f"{100 * r.length_auroc_mean:.1f} ± {100 * r.length_auroc_std:.1f}", duplicate_counts(r), str(r.blind_warnings),
            "; ".join(f"{c.model}: {_auroc(c)} ⚠" for c in controls.itertuples()) or "–"]) + " |")
    return "\n".join(lines) + "\n"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def family_colours(families: list[str]) -> dict[str, tuple]:
    """One fixed colour per headline family (the config's order), the same in every figure: the ten
    of tab10, then black, then tab10 again."""
    cmap = _pyplot().get_cmap("tab10")
    palette = [cmap(i) for i in range(10)] + [(0.0, 0.0, 0.0, 1.0)]
    return {f: palette[i % len(palette)] for i, f in enumerate(families)}


def roc_figure(panels: dict[str, pd.DataFrame], headline: dict[str, str], title: str, path: str) -> dict[str, list[str]]:
    """Low-FPR ROC curves to a PNG, on log-log axes: one panel per model, one curve per headline
    family present (its fixed column; scores of every seed pooled), the legend outside the axes.

    Each panel's table has ``label`` and the method columns. FPR below 1 / n_neg cannot be measured,
    so each panel starts there; dotted lines mark FPR 1% and 5%, the dashed diagonal is chance.
    Returns each panel's title and the families it draws.
    """
    plt = _pyplot()
    colours = family_colours(list(headline))
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n + 2.2, 3.8), dpi=110, squeeze=False)
    shown: dict[str, object] = {}
    drawn: dict[str, list[str]] = {}
    for ax, (model, scores) in zip(axes[0], panels.items()):
        drawn[f"{title} / {model}"] = [f for f, col in headline.items() if col in scores.columns]
        y = scores["label"].to_numpy()
        low_x, low_y = 1 / max(1, int((y == 0).sum())), 1 / max(1, int((y == 1).sum()))
        for family, col in headline.items():
            if col not in scores.columns:
                continue
            fpr, tpr, _ = roc_curve(y, scores[col])
            (line,) = ax.plot(np.clip(fpr, low_x, 1), np.clip(tpr, low_y / 2, 1), drawstyle="steps-post",
                              color=colours[family], lw=1.3, label=family)
            shown.setdefault(family, line)
        grid = np.logspace(np.log10(low_x), 0, 50)
        ax.plot(grid, grid, ls="--", color="grey", lw=0.8)
        for t in (0.01, 0.05):
            if t >= low_x:
                ax.axvline(t, ls=":", color="grey", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(low_x, 1), ylim=(low_y / 2, 1.05), xlabel="false positive rate",
               title=f"{title} / {model}")
        ax.set_ylabel("true positive rate")
    order = [f for f in headline if f in shown]  # the config's order, whichever panel drew a family first
    fig.legend([shown[f] for f in order], order, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               frameon=False)
    fig.tight_layout()
    fig.savefig(path, format="png", bbox_inches="tight")
    plt.close(fig)
    return drawn


def forest_figure(table: pd.DataFrame, headline: dict[str, str], path: str, level: float = 0.95) -> dict[str, list[str]]:
    """AUROC with its bootstrap interval per headline row: one panel per dataset, one line per
    (model, family), chance at 50%. ``table``: the headline table (:mod:`mialab.evaluation.headline`).
    Returns each panel's title and its lines, top to bottom."""
    plt = _pyplot()
    if table.empty:  # no headline column was scored: an empty figure that says so
        fig, ax = plt.subplots(figsize=(4, 1), dpi=110)
        ax.axis("off")
        ax.text(0.5, 0.5, "no headline method was scored", ha="center", va="center")
        fig.savefig(path, format="png")
        plt.close(fig)
        return {}
    colours = family_colours(list(headline))
    datasets = list(dict.fromkeys(table["dataset"]))
    rows = [len(table[table["dataset"] == d]) for d in datasets]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 0.28 * max(rows) + 1.2), dpi=110,
                             squeeze=False)
    drawn: dict[str, list[str]] = {}
    for ax, d in zip(axes[0], datasets):
        g = table[table["dataset"] == d].reset_index(drop=True)
        drawn[d] = [f"{r['model']} · {r['family']}" for _, r in g.iterrows()]
        pos = np.arange(len(g))[::-1]
        for y_, (_, r) in zip(pos, g.iterrows()):
            c = colours.get(r["family"], "black")
            ax.errorbar(100 * r["auroc"], y_, xerr=[[100 * (r["auroc"] - r["auroc_lo"])], [100 * (r["auroc_hi"] - r["auroc"])]],
                        fmt="o", color=c, ms=4, capsize=2, lw=1.2)
        ax.axvline(50, ls="--", color="grey", lw=0.8)
        ax.set_yticks(pos, drawn[d], fontsize=8)
        ax.set(xlabel=f"AUROC (%) with {level:.0%} bootstrap CI", title=d, xlim=(0, 100))
        for y_, (a, b) in zip(pos[1:], zip(g["model"][:-1], g["model"][1:])):
            if a != b:
                ax.axhline(y_ + 0.5, color="lightgrey", lw=0.6)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return drawn


def results_markdown(summary: pd.DataFrame, headline: pd.DataFrame, *, fpr_targets: list[float], bootstrap: dict,
                     truncation_warn: float, checks: pd.DataFrame | None = None,
                     repeats: dict[str, int | None] | None = None, controls: list[str] = (),
                     reproduction: pd.DataFrame | None = None) -> str:
    """``results/summary.md``: warnings (truncation; when the split checks ran, ``checks``: their table, split
    overlap; no-members ``controls`` off 50%), the headline, the paper's figures beside the run's where the config
    lists any (``reproduction``: :func:`mialab.evaluation.reproduction.reproduction_rows`), every method's row and
    the split checks beside each dataset (``repeats``: the exact repeats each dataset's pool dropped)."""
    from mialab.checks.leakage import overlap_warning, per_dataset

    metrics = ["auroc", *(fpr_column(t) for t in fpr_targets)]
    off = off_chance_controls(headline, list(controls))
    warnings = [("truncation", w) for w in truncation_warnings(summary, truncation_warn)]
    if checks is not None:
        warnings += [("split overlap", overlap_warning(r.dataset, r.n_shared, r.n_candidates, r.overlap_warn))
                     for r in per_dataset(checks).itertuples() if r.overlap_warning]
    warnings += [("no-members control", w) for w in control_warnings(off)]
    markdown = "# Membership inference results\n\n"
    if warnings:
        markdown += "".join(f"> **Warning ({kind}):** {w}\n>\n" for kind, w in warnings) + "\n"
    markdown += ("## Headline\n\n"
                 + headline_markdown(headline, fpr_targets, bootstrap["level"], bootstrap["resamples"])
                 + "\nFigures: `results/evaluation/forest.png` (AUROC with intervals), "
                   "`results/evaluation/<dataset>/roc.png` (low-FPR ROC of the headline rows); per-method figures "
                   "in `results/adra/report/<dataset>/steps.png` (AUROC against the RL step) and "
                   "`results/lara/report/<dataset>/layers.png` (LaRA's layers), where those methods ran.\n")
    if reproduction is not None and len(reproduction):
        markdown += "\n## Reproduction\n\n" + reproduction_markdown(reproduction, bootstrap["level"])
    markdown += ("\n## Appendix: every method and ablation\n\nAUROC and TPR at FPR ≤ target, in %, mean ± std over "
                 "seeds (higher score = member; see docs/conventions.md). Summaries picked on the evaluation labels "
                 "(best, top-5) are optimistic.\n\n" + markdown_table(summary, metrics))
    if checks is not None:
        markdown += ("\n## Split checks\n\nPer dataset: the exact repeats its pool dropped (each kept once; n/a: a pool "
                     "built before they were counted), the most candidates two seeds' splits share (⚠: the seeds' ± std "
                     "understates the spread), and, without any model, the blind baseline (cross-validated AUROC of a "
                     "bag-of-n-grams classifier; near 50% = no topic or date shift, flagged above the configured "
                     "threshold), the AUROC of length alone and cross-class duplicate pairs; last, the headline rows of "
                     "the models no member reached whose AUROC interval excludes 50% (a shift the blind baseline may "
                     "miss); details in results/leakage/summary.md.\n\n"
                     + split_checks_markdown(checks, repeats or {}, off))
    return markdown
