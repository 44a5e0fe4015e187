"""The headline table: per (dataset, model), one row per method family at the score column fixed
for it in ``evaluation.headline`` (never picked on labels), with bootstrap CIs and a paired test
against ``evaluation.baseline`` on the same candidates (:mod:`mialab.evaluation.bootstrap`)."""

from __future__ import annotations

import pandas as pd

from mialab.evaluation import bootstrap as bs
from mialab.evaluation.metrics import fpr_column
from mialab.evaluation.stage import TRUNCATED_METHODS


def headline_rows(dataset: str, model: str, seeds: list[pd.DataFrame], headline: dict[str, str], baseline: str,
                  fpr_targets: list[float], spec: dict) -> pd.DataFrame:
    """Headline rows of one (dataset, model) from its merged per-seed score tables (``id``, ``label``,
    one column per method, optionally ``truncated``; the same methods in every seed).

    Columns: dataset, model, family, method, auroc with ``auroc_lo`` / ``auroc_hi``, each TPR@FPR
    with its interval, ``n_neg`` (non-members per seed), ``fp_allowed@<t>`` (false positives the
    target allows per seed), the baseline's AUROC, ``delta_auroc`` (method − baseline) and its
    paired ``p_value``, ``n_truncated`` (candidates cut by ``scoring.truncation: truncate``, summed
    over seeds; None for methods whose score table does not record it), ``n`` (candidates over seeds).
    """
    labels = [t["label"].to_numpy() for t in seeds]
    draws = bs.draw([t["id"].to_numpy() for t in seeds], labels, spec["resamples"], spec["seed"])
    point = bs.identity(labels)
    metrics = ["auroc", *fpr_targets]
    present = [(family, col) for family, col in headline.items() if all(col in t.columns for t in seeds)]
    base = None
    if all(baseline in t.columns for t in seeds):
        base_scores = [t[baseline].to_numpy() for t in seeds]
        base = (float(bs.metric_draws(base_scores, point, "auroc")[0]), bs.metric_draws(base_scores, draws, "auroc"))
    n_neg = min(int((t["label"] == 0).sum()) for t in seeds)
    rows = []
    for family, col in present:
        scores = [t[col].to_numpy() for t in seeds]
        row = {"dataset": dataset, "model": model, "family": family, "method": col}
        for m in metrics:
            name = "auroc" if m == "auroc" else fpr_column(m)
            row[name] = float(bs.metric_draws(scores, point, m)[0])
            row[f"{name}_lo"], row[f"{name}_hi"] = bs.interval(bs.metric_draws(scores, draws, m), spec["level"])
        row["n_neg"] = n_neg
        for t in fpr_targets:
            row[f"fp_allowed@{t:g}"] = bs.allowed_false_positives(t, n_neg)
        row["baseline"] = baseline if base else None
        if base:
            row["baseline_auroc"] = base[0]
            row["delta_auroc"] = row["auroc"] - base[0]
            row["p_value"] = bs.paired_p_value(bs.metric_draws(scores, draws, "auroc"), base[1])
        cut = all(col in t.attrs.get(TRUNCATED_METHODS, ()) for t in seeds)
        row["n_truncated"] = int(sum(t["truncated"].sum() for t in seeds)) if cut else None
        row["n"] = int(sum(len(t) for t in seeds))
        row["n_seeds"] = len(seeds)
        rows.append(row)
    return pd.DataFrame(rows)


def headline_table(tables: list[tuple[str, str, int, pd.DataFrame]], headline: dict[str, str], baseline: str,
                   fpr_targets: list[float], spec: dict) -> pd.DataFrame:
    """:func:`headline_rows` of every (dataset, model) among merged ``(model, dataset, seed, scores)`` tables."""
    groups: dict[tuple[str, str], list[pd.DataFrame]] = {}
    for model, dataset, seed, df in sorted(tables, key=lambda t: t[2]):  # models and datasets in their given order
        groups.setdefault((dataset, model), []).append(df)
    parts = [headline_rows(d, m, seeds, headline, baseline, fpr_targets, spec) for (d, m), seeds in groups.items()]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _pct(r, name: str) -> str:
    return f"{100 * r[name]:.1f} [{100 * r[name + '_lo']:.1f}, {100 * r[name + '_hi']:.1f}]"


def _p(p) -> str:
    if p is None or pd.isna(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def headline_markdown(table: pd.DataFrame, fpr_targets: list[float], level: float, resamples: int) -> str:
    """The headline table in markdown, one block per (dataset, model), with how to read it."""
    if table.empty:
        return "No headline method was scored.\n"
    tprs = [fpr_column(t) for t in fpr_targets]
    head = ["family", "method", "AUROC", *tprs, "n_neg (FP allowed)", "Δ AUROC vs baseline", "p", "truncated"]
    out = [f"AUROC and TPR at FPR ≤ target in %, mean over seeds with {level:.0%} bootstrap intervals "
           f"({resamples} resamples of the distinct candidates, members and non-members apart; a candidate in several "
           f"seeds' splits is one candidate). Δ and p: paired bootstrap against "
           f"the fixed passive baseline on the same candidates (two-sided). n_neg: non-members per seed; FP allowed: "
           f"the false positives each FPR target permits (0: TPR counts members above every non-member). "
           f"truncated: candidates scored on their first scoring.max_length tokens only (over seeds). Every row's "
           f"method is fixed in evaluation.headline before the run; label-picked summaries stay in the appendix.\n"]
    for (dataset, model), g in table.groupby(["dataset", "model"], sort=False):
        base = g["baseline"].dropna().iloc[0] if g["baseline"].notna().any() else None
        out.append(f"\n### {dataset} / {model}" + (f" (baseline {base})" if base else "") + "\n")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for _, r in g.iterrows():
            fp = ", ".join(str(int(r[f"fp_allowed@{t:g}"])) for t in fpr_targets)
            delta = "–" if pd.isna(r.get("delta_auroc")) or r["method"] == base else f"{100 * r['delta_auroc']:+.1f}"
            p = "–" if r["method"] == base else _p(r.get("p_value"))
            cut = "" if pd.isna(r["n_truncated"]) else f"{int(r['n_truncated'])}/{int(r['n'])}"
            cells = [r["family"], f"`{r['method']}`", _pct(r, "auroc"), *(_pct(r, c) for c in tprs),
                     f"{int(r['n_neg'])} ({fp})", delta, p, cut]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
