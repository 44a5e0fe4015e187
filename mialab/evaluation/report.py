"""Human-facing outputs: the markdown results table and ROC plots."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import roc_curve


def markdown_table(summary: pd.DataFrame, metrics: list[str]) -> str:
    """Results as a markdown table, ``mean ± std`` per metric (in %)."""
    head = ["dataset", "model", "method", *metrics, "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in summary.iterrows():
        cells = [str(r["dataset"]), str(r["model"]), str(r["method"])]
        cells += [f"{100 * r[m + '_mean']:.1f} ± {100 * r[m + '_std']:.1f}" for m in metrics]
        cells.append(str(int(r["n_seeds"])))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def roc_figure(panels: dict[str, pd.DataFrame], title: str, path: str) -> None:
    """ROC curves to a PNG: one panel per model, one colour per method, one thin line per seed.

    Each panel's table has ``label``, ``seed`` and one column per method.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 4.6), dpi=110, squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, (model, scores) in zip(axes[0], panels.items()):
        methods = [c for c in scores.columns if c not in ("id", "label", "n_tokens", "seed")]
        for i, method in enumerate(methods):
            for j, (_, df) in enumerate(scores.groupby("seed")):
                fpr, tpr, _ = roc_curve(df["label"], df[method])
                ax.plot(fpr, tpr, color=colours(i % 10), lw=1.0, alpha=0.75, label=method if j == 0 else None)
        ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=0.8)
        ax.set(xlabel="false positive rate", ylabel="true positive rate", title=f"{title} / {model}",
               xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def finite_or_raise(df: pd.DataFrame, columns: list[str], what: str) -> None:
    """Raise naming the column when a score table holds NaN or inf."""
    for c in columns:
        if not np.all(np.isfinite(df[c].to_numpy(dtype=np.float64))):
            raise ValueError(f"{what}: column {c!r} holds NaN or inf")
