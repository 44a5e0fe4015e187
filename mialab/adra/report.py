"""ADRA's report for one dataset: each attack's AUROC summary and AUROC against the RL step.

An *attack* is the prefix of a score column (``n_sampling``, ``adra``, ``adra_plus``, ``adra_sft``,
``adra_init`` = the untrained policy sampled like ADRA, ``adra@step8`` = an intermediate checkpoint);
the score tables' columns (no prefix: the passive baselines and the scoring attacks of ``scoring.methods``)
form the attack ``passive``. Per (model, attack), over
seeds (mean and sample std):

- ``top5``: the mean of the attack's five best metric AUROCs in each seed (the paper's summary;
  the five are picked on the evaluation labels, so it is optimistic);
- ``primary``: the AUROC of one metric fixed in the config before any result was seen;
- ``best``: the metric with the highest mean AUROC (for the passive baselines, the best baseline).

Where the config lists the paper's figures on the dataset (``paper_targets``: the ADRA paper's AUROC and
reconstruction tables), the report sets them beside the run's (:mod:`mialab.evaluation.reproduction`), the same
rows as in ``results/evaluation/summary.md``.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from mialab.evaluation.reproduction import computable, reproduction_markdown, reproduction_rows
from mialab.evaluation.stage import evaluate_tables, merge_tables
from mialab.n_sampling.attack import method_of, top_k_mean

PASSIVE = "passive"
STEP = re.compile(r"^(?P<variant>[a-z_]+)@step(?P<step>\d+)$")


def attack_of(column: str) -> str:
    """The attack a score column belongs to; passive baselines have no ``<attack>/`` prefix."""
    return method_of(column) if "/" in column else PASSIVE


def metric_of(column: str) -> str:
    return column.split("/", 1)[1] if "/" in column else column


def per_seed_aurocs(tables: list[tuple[str, str, int, pd.DataFrame]], fpr_targets: list[float]) -> pd.DataFrame:
    """AUROC and TPR@FPR of every score column of (model, dataset, seed, scores) ``tables`` (rows dataset, model,
    seed, method, attack, metric, ...)."""
    out = evaluate_tables(tables, fpr_targets)
    out["attack"] = out["method"].map(attack_of)
    out["metric"] = out["method"].map(metric_of)
    return out


def summary(per_seed: pd.DataFrame, primary: str, k: int = 5) -> pd.DataFrame:
    """One row per (model, attack): top-k mean, the primary metric and the best metric, mean ± std over seeds."""
    rows = []
    for (model, attack), g in per_seed.groupby(["model", "attack"], sort=False):
        seeds = sorted(g["seed"].unique())
        by_metric = g.groupby("metric")["auroc"].mean()
        best = str(by_metric.idxmax())
        row = {"model": model, "attack": attack, "best_metric": best, "n_seeds": len(seeds)}
        parts = {"best": g[g["metric"] == best].set_index("seed")["auroc"]}
        if attack != PASSIVE:
            parts["top5"] = g.groupby("seed")["auroc"].agg(lambda a: top_k_mean(a.to_numpy(), k))
            parts["primary"] = g[g["metric"] == primary].set_index("seed")["auroc"]
        for name, values in parts.items():
            values = values.to_numpy(dtype=np.float64)
            row[f"{name}_mean"] = float(values.mean()) if len(values) else np.nan
            row[f"{name}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def step_of(attack: str, finals: dict[str, int]) -> tuple[str | None, int] | None:
    """(variant, RL step) of an ADRA attack, given the last step of each variant's run (``finals``):
    ``adra_init`` is step 0 of every variant (variant None), ``v@stepK`` step K of v, a final policy ``v``
    the run's last step; None for other attacks."""
    if attack == "adra_init":
        return None, 0
    if attack in finals:
        return attack, int(finals[attack])
    m = STEP.match(attack)
    return (m["variant"], int(m["step"])) if m else None


def with_steps(summary_: pd.DataFrame, final_steps: dict[str, dict[str, int]]) -> pd.DataFrame:
    """The summary with the RL ``step`` of every ADRA attack (NaN for the others).

    ``final_steps[model][variant]`` is the last step of that model's run of the variant.
    """
    steps = [step_of(r["attack"], final_steps.get(r["model"], {})) for _, r in summary_.iterrows()]
    return summary_.assign(step=[s[1] if s else np.nan for s in steps])


def final_steps(trains: list[tuple[str, str]], logs: list[pd.DataFrame]) -> dict[str, dict[str, int]]:
    """``{model: {variant: last step}}`` from the trainer log of each (model, variant) run (the largest
    over the run's seeds)."""
    finals: dict[str, dict[str, int]] = {}
    for (model, variant), log in zip(trains, logs):
        finals.setdefault(model, {})
        finals[model][variant] = max(int(log["step"].max()), finals[model].get(variant, 0))
    return finals


def step_curve(summary_: pd.DataFrame, final_steps: dict[str, dict[str, int]]) -> pd.DataFrame:
    """AUROC summaries against the RL step (rows model, variant, step, top5/primary mean and std);
    the untrained policy is step 0 of every variant."""
    rows = []
    for _, r in summary_.iterrows():
        finals = final_steps.get(r["model"], {})
        point = step_of(r["attack"], finals)
        if point is None:
            continue
        for variant in ([point[0]] if point[0] else finals):
            rows.append({"model": r["model"], "variant": variant, "step": point[1],
                         **{c: r[c] for c in ("top5_mean", "top5_std", "primary_mean", "primary_std")}})
    cols = ["model", "variant", "step", "top5_mean", "top5_std", "primary_mean", "primary_std"]
    return pd.DataFrame(rows, columns=cols).sort_values(["model", "variant", "step"]).reset_index(drop=True)


def markdown(summary_: pd.DataFrame, dataset: str, primary: str, reproduction: pd.DataFrame, level: float) -> str:
    """The summary as a markdown table (AUROC in %), then the paper's figures beside the run's where the config lists
    any (``reproduction``: :func:`report`'s rows, their intervals at ``level``)."""
    def cell(r, name):
        return "" if pd.isna(r.get(f"{name}_mean")) else f"{100 * r[f'{name}_mean']:.1f} ± {100 * r[f'{name}_std']:.1f}"

    lines = [f"# ADRA / N-Sampling on {dataset}", "",
             f"AUROC (%), mean ± std over seeds. top-5 = mean of the five best metric AUROCs per seed (picked on "
             f"the labels: optimistic); primary = `{primary}`, fixed in advance; best = the metric with the highest "
             "mean AUROC (passive: the best baseline).", "",
             "| model | attack | top-5 | primary | best | best metric | seeds |", "|---|---|---|---|---|---|---|"]
    for _, r in summary_.iterrows():
        lines.append(f"| {r['model']} | {r['attack']} | {cell(r, 'top5')} | {cell(r, 'primary')} | {cell(r, 'best')} "
                     f"| {r['best_metric']} | {r['n_seeds']} |")
    if len(reproduction):
        lines += ["", "## Reproduction", "", reproduction_markdown(reproduction, level)]
    return "\n".join(lines) + "\n"


def report(dataset: str, tables: list[tuple[str, int, pd.DataFrame]], trains: list[tuple[str, str]],
           logs: list[pd.DataFrame], fpr_targets: list[float], primary: str, targets: list[dict], bootstrap: dict
           ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(summary, summary with RL steps, step curve, reproduction rows) of one dataset from its (model, seed, score
    table) ``tables`` and the trainer ``logs`` of its (model, variant) ``trains``; the reproduction rows are those
    of the paper ``targets`` its tables hold (``bootstrap``: ``evaluation.bootstrap``)."""
    merged = merge_tables([(m, dataset, s, t) for m, s, t in tables])
    table = summary(per_seed_aurocs(merged, fpr_targets), primary)
    finals = final_steps(trains, logs)
    reproduction = reproduction_rows(computable(targets, merged), merged, bootstrap)
    return table, with_steps(table, finals), step_curve(table, finals), reproduction


def step_figure(curve: pd.DataFrame, summary_: pd.DataFrame, dataset: str, path: str) -> None:
    """AUROC (top-5 mean, solid; primary metric, dashed) against the RL step, one panel per model;
    N-Sampling and the best passive baseline as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(summary_["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), dpi=110, squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, model in zip(axes[0], models):
        for i, (variant, g) in enumerate(curve[curve["model"] == model].groupby("variant", sort=True)):
            ax.errorbar(g["step"], g["top5_mean"], yerr=g["top5_std"], color=colours(i), marker="o", capsize=3,
                        label=f"{variant} (top-5)")
            ax.plot(g["step"], g["primary_mean"], color=colours(i), ls="--", marker=".", label=f"{variant} (primary)")
        rows = summary_[summary_["model"] == model].set_index("attack")
        for attack, column, style in (("n_sampling", "top5_mean", "-."), (PASSIVE, "best_mean", ":")):
            if attack in rows.index:
                ax.axhline(rows.loc[attack, column], color="black", ls=style, lw=1, label=f"{attack} ({column[:-5]})")
        ax.axhline(0.5, color="grey", lw=0.6)
        ax.set(xlabel="RL step", ylabel="AUROC", title=f"{dataset} / {model}", ylim=(0, 1))
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
