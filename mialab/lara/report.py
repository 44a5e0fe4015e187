"""LaRA's report: the paper's comparison table and the layer-wise figure of RSM / DC / RSI.

- :func:`lara_summary`: AUROC and TPR at each FPR target, mean ± std over seeds, of the LaRA stage's
  columns (``lara``, ``lara/...``) and the output-level baselines the foundation scores on the same
  split (PPL = ``loss``, Min-K% = ``min_k@k``, Min-K%++ = ``min_k_plus_plus@k``), per model;
- :func:`layer_figure`: per model (row) and metric (column), the mean over questions of the raw
  metric at every layer, members vs non-members (band: ± one standard error), with the clean
  reference set's median as a dotted line. Labels are read here, for display only;
- :func:`lara_markdown` ends with the paper's figures the config lists (``paper_targets``, Table 1) beside the
  run's, the rows of the evaluation's Reproduction table (:mod:`mialab.evaluation.reproduction`) of these methods.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mialab.evaluation.metrics import aggregate_over_seeds, fpr_column
from mialab.evaluation.report import markdown_table
from mialab.evaluation.reproduction import reproduction_markdown
from mialab.lara.stages import EVALUATED, IN_SET_PREFIX, METRIC_COLUMNS, PREFIX, REFERENCE

OUTPUT_BASELINES = ("loss", "min_k", "min_k_plus_plus")
METRIC_TITLES = {"rsm": "RSM (shift magnitude)", "dc": "DC (directional collapse)", "rsi": "RSI (stability)"}


def is_reported(method: str) -> bool:
    """A LaRA-stage column (``lara...``, ``lara_in_set...``), or one of the foundation's PPL / Min-K% /
    Min-K%++ columns."""
    return (any(method == p or method.startswith(p + "/") for p in (PREFIX, IN_SET_PREFIX))
            or method.split("@")[0] in OUTPUT_BASELINES)


def lara_summary(per_seed: pd.DataFrame, models: list[str], fpr_targets: list[float]) -> pd.DataFrame:
    """Mean ± std over seeds of the reported methods of ``models``, in the order of ``models``."""
    rows = per_seed[per_seed["model"].isin(models) & per_seed["method"].map(is_reported)]
    if rows.empty:
        raise ValueError(f"no LaRA results for models {models}")
    summary = aggregate_over_seeds(rows, ["dataset", "model", "method"], ["auroc", *map(fpr_column, fpr_targets)])
    order = {m: i for i, m in enumerate(models)}
    return summary.sort_values("model", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def lara_markdown(summary: pd.DataFrame, fpr_targets: list[float], reproduction: pd.DataFrame, level: float,
                  notes: str = "") -> str:
    """The summary as a markdown document (values in %), then the rows of ``reproduction`` (the evaluation's, at
    ``level``) whose method the summary reports."""
    head = ("# LaRA and output-level baselines\n\nAUROC and TPR at FPR ≤ target, in %, mean ± std over seeds "
            "(higher score = member). `lara`: the detection score; `lara/<metric>`: one metric; `lara/no_<metric>`: "
            "leave one out; `lara/early|mid|late`: a 9:9:10 run of the layers; `lara_in_set...`: the same scores "
            "standardised on the evaluated split's own non-members (**uses the evaluation labels**, the released "
            "code's default; optimistic, not comparable with `lara`); `lara/recall`: ReCaLL (a non-member prefix); "
            "`lara/cdd|self_critique|recall_lara_code|ppl_response|min_k_response@k|min_k_plus_plus_response@k|dime`: "
            "the LaRA code's output-level baselines on the model's greedy answers (`recall_lara_code` is its "
            "\"Recall\"; `min_k_response` keeps its sign, the inverse of Min-K%'s); `lara/lara+sc@b`: b pr(SC) + (1 - b) pr(LaRA); `loss` (PPL), "
            "`min_k@k`, `min_k_plus_plus@k`: the passive baselines on the split's texts.\n\n")
    mine = reproduction[reproduction["method"].map(is_reported).astype(bool)]
    reproduced = ("\n## Reproduction\n\n" + reproduction_markdown(mine, level)) if len(mine) else ""
    return (head + (notes + "\n\n" if notes else "") + markdown_table(summary, ["auroc", *map(fpr_column, fpr_targets)])
            + reproduced)


def layer_figure(metrics: pd.DataFrame, path: str, title: str) -> None:
    """Layer-wise figure (module doc) from a table with ``model``, ``id``, ``set``, ``layer``,
    ``label`` (evaluated questions; NaN for the reference set) and the metric columns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(metrics["model"]))
    fig, axes = plt.subplots(len(models), len(METRIC_COLUMNS), figsize=(4.2 * len(METRIC_COLUMNS), 3.0 * len(models)),
                             dpi=110, squeeze=False)
    groups = {"members": ("tab:red", lambda d: d[(d["set"] == EVALUATED) & (d["label"] == 1)]),
              "non-members": ("tab:blue", lambda d: d[(d["set"] == EVALUATED) & (d["label"] == 0)])}
    for row, model in zip(axes, models):
        data = metrics[metrics["model"] == model]
        for ax, metric in zip(row, METRIC_COLUMNS):
            for name, (colour, select) in groups.items():
                stats = select(data).groupby("layer")[metric].agg(["mean", "std", "count"])
                se = stats["std"].fillna(0.0) / np.sqrt(stats["count"])
                ax.plot(stats.index, stats["mean"], color=colour, marker="o", ms=3, label=name)
                ax.fill_between(stats.index, stats["mean"] - se, stats["mean"] + se, color=colour, alpha=0.2)
            ref = data[data["set"] == REFERENCE].groupby("layer")[metric].median()
            ax.plot(ref.index, ref.to_numpy(), color="grey", ls=":", label="reference (median)")
            ax.set(title=f"{model}: {METRIC_TITLES[metric]}", xlabel="layer", ylabel=metric)
            ax.axhline(0.0, color="black", lw=0.5)
        row[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
