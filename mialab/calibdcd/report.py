"""CalibDCD's tables in the paper's layout, from the workflow's evaluation and calibration outputs.

- main results (Tables 2 and 3): AUC / TPR@5%FPR of each detector without and with CalibDCD, per
  dataset and target model (base vs post-trained in the tiny world), mean ± std over seeds;
- ablations (Table 4): every variant against the complete method on the same runs (a run is one
  dataset, model, detector and seed); Fixed Full Correction only on the runs where CalibDCD chose
  lambda < 1 (the identity counts as lambda = 0); the fixed (r = 3, lambda = 0.9) configuration of
  the adaptive-selection analysis (Figs. 5-6) on all runs;
- false-positive recovery (Sec. 5.4, Fig. 4): flagged and recovered D-cal non-members summed over
  seeds, per setting, per detector and overall;
- selection: the kept views, (r, lambda) and basis size of every run, and each view's FPP;
- detectors beside the baselines: the uncalibrated detectors' AUC next to the passive baselines'
  (e.g. Min-K%++) on the same evaluation splits: on a base model a feature-based detector that
  stays far below Min-K%++ does not find the pretraining members a likelihood attack finds;
- reproduction: the paper's figures the config lists (``paper_targets``, Tables 2 and 3) beside the run's
  (:mod:`mialab.evaluation.reproduction`), the same rows as in ``results/evaluation/summary.md``.

AUC and TPR come from the common evaluation (``results/evaluation/per_seed.parquet``), so the
numbers are those of the results table. Metrics are fractions; tables show percentages.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from mialab.evaluation.metrics import fpr_column
from mialab.evaluation.reproduction import computable, reproduction_markdown, reproduction_rows
from mialab.evaluation.stage import evaluate_tables, merge_tables

PREFIX = "calibdcd/"
DETECTOR_NAMES = {"veilprobe": "VeilProbe", "dpdllm": "DPDLLM"}
VARIANT_NAMES = {
    "calibdcd": "CalibDCD",
    "random3": "Random-3 Views",
    "top1": "Top-1 View",
    "no_consensus": "No Cross-View Consensus",
    "binary_weights": "Binary Positive Weight",
    "full_correction": "Fixed Full Correction",
    "fixed_r3_l09": "Fixed r=3, λ=0.9",
    "original": "Original detector",
}
RUN_KEYS = ["dataset", "model", "detector", "seed"]


def run_rows(summary: dict) -> list[dict]:
    """One row per variant of a calibration job's summary: run keys, selection and recovery counts."""
    keys = {k: summary[k] for k in RUN_KEYS}
    rows = []
    for variant, s in summary["variants"].items():
        rec = s["recovery"]
        rows.append({**keys, "variant": variant, "kept_views": ", ".join(s["kept_views"]), "rank": s["rank"],
                     "lam": s["lam"], "basis_dim": s["basis_dim"], "n_supervised": s["n_supervised"],
                     "n_calibration": s["n_calibration"], "n_pool": s["n_pool"], "recovery_view": rec["view"],
                     "flagged": rec["flagged"], "recovered": rec["recovered"], "recovery_rate": rec["recovery_rate"]})
    return rows


def calibdcd_metrics(per_seed: pd.DataFrame) -> pd.DataFrame:
    """The CalibDCD rows of the per-seed results, with ``detector`` and ``variant`` split out of the method."""
    rows = per_seed[per_seed["method"].str.startswith(PREFIX)].copy()
    if rows.empty:
        raise ValueError("no calibdcd/<detector>/<variant> method in the per-seed results")
    parts = rows["method"].str.slice(len(PREFIX)).str.split("/", n=1, expand=True)
    return rows.assign(detector=parts[0], variant=parts[1])


def _pct(mean: float, std: float | None = None) -> str:
    return f"{100 * mean:.1f}" if std is None else f"{100 * mean:.1f} ± {100 * std:.1f}"


def main_results(per_seed: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Paper Tables 2/3: rows 'Detector' and 'Detector + CalibDCD', columns 'dataset / model', mean ± std."""
    m = calibdcd_metrics(per_seed)
    m = m[m["variant"].isin(["original", "calibdcd"])]
    g = m.groupby(["detector", "variant", "dataset", "model"], sort=False)[metric]
    stats = g.mean().to_frame("mean").join(g.std(ddof=1).fillna(0.0).rename("std")).reset_index()
    stats["row"] = [DETECTOR_NAMES.get(d, d) + (" + CalibDCD" if v == "calibdcd" else "")
                    for d, v in zip(stats["detector"], stats["variant"])]
    stats["column"] = stats["dataset"] + " / " + stats["model"]
    stats["cell"] = [_pct(a, b) for a, b in zip(stats["mean"], stats["std"])]
    table = stats.pivot(index="row", columns="column", values="cell")
    order = [r for d in m["detector"].unique() for r in (DETECTOR_NAMES.get(d, d), DETECTOR_NAMES.get(d, d) + " + CalibDCD")]
    columns = list(dict.fromkeys(stats["column"]))
    return table.loc[[r for r in order if r in table.index], columns].rename_axis(index=metric, columns=None)


def beside_baselines(per_seed: pd.DataFrame, metric: str, baselines: Sequence[str]) -> pd.DataFrame:
    """Rows 'dataset / model', columns the uncalibrated detectors then the ``baselines`` methods (names
    of the per-seed results, e.g. ``min_k_plus_plus@0.2``), mean ± std over seeds."""
    m = per_seed[per_seed["method"].isin([f"{PREFIX}{d}/original" for d in DETECTOR_NAMES]) |
                 per_seed["method"].isin(baselines)]
    if m.empty:
        raise ValueError("no uncalibrated detector and no baseline in the per-seed results")
    names = {f"{PREFIX}{d}/original": n for d, n in DETECTOR_NAMES.items()}
    g = m.groupby(["dataset", "model", "method"], sort=False)[metric]
    stats = g.mean().to_frame("mean").join(g.std(ddof=1).fillna(0.0).rename("std")).reset_index()
    stats["row"] = stats["dataset"] + " / " + stats["model"]
    stats["column"] = stats["method"].map(lambda x: names.get(x, x))
    stats["cell"] = [_pct(a, b) for a, b in zip(stats["mean"], stats["std"])]
    table = stats.pivot(index="row", columns="column", values="cell")
    columns = [n for n in DETECTOR_NAMES.values() if n in table.columns] + [b for b in baselines if b in table.columns]
    return table.loc[list(dict.fromkeys(stats["row"])), columns].rename_axis(index=metric, columns=None)


def main_results_long(per_seed: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per dataset, model and detector: each metric's mean without / with CalibDCD and the gain (fractions)."""
    m = calibdcd_metrics(per_seed)
    m = m[m["variant"].isin(["original", "calibdcd"])]
    wide = m.pivot_table(index=["dataset", "model", "detector"], columns="variant", values=metrics, aggfunc="mean",
                         sort=False)
    out = pd.DataFrame(index=wide.index)
    for metric in metrics:
        out[f"{metric}_original"] = wide[(metric, "original")]
        out[f"{metric}_calibdcd"] = wide[(metric, "calibdcd")]
        out[f"{metric}_gain"] = out[f"{metric}_calibdcd"] - out[f"{metric}_original"]
    out["n_seeds"] = m[m["variant"] == "calibdcd"].groupby(["dataset", "model", "detector"], sort=False).size()
    return out.reset_index()


def _per_run(per_seed: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per run (dataset, model, detector, seed), one column per variant."""
    m = calibdcd_metrics(per_seed)
    return m.pivot_table(index=RUN_KEYS, columns="variant", values=metric, aggfunc="first")


def ablations(per_seed: pd.DataFrame, runs: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Paper Table 4: per configuration, the number of runs and each metric's mean with its change from
    CalibDCD on the same runs (``runs``: one row per run and variant with the selected ``lam``)."""
    wide = {metric: _per_run(per_seed, metric) for metric in metrics}
    index = wide[metrics[0]].index
    lam = runs[runs["variant"] == "calibdcd"].set_index(RUN_KEYS)["lam"].reindex(index)
    if lam.isna().any():
        raise ValueError(f"{int(lam.isna().sum())} run(s) have metrics but no CalibDCD selection")
    every, partial = np.ones(len(index), bool), (lam < 1.0).to_numpy()
    variants = wide[metrics[0]].columns
    plan = [("CalibDCD", "calibdcd", every)]
    plan += [(VARIANT_NAMES[v], v, every) for v in ("random3", "top1", "no_consensus", "binary_weights") if v in variants]
    if "full_correction" in variants:
        plan += [("CalibDCD (λ<1)", "calibdcd", partial), (VARIANT_NAMES["full_correction"], "full_correction", partial)]
    plan += [(VARIANT_NAMES[v], v, every) for v in ("fixed_r3_l09", "original") if v in variants]
    rows = []
    for name, variant, mask in plan:
        row = {"configuration": name, "variant": variant, "n": int(mask.sum())}
        for metric in metrics:
            values, complete = wide[metric][variant].to_numpy()[mask], wide[metric]["calibdcd"].to_numpy()[mask]
            row[metric] = float(values.mean()) if mask.any() else np.nan
            row[f"{metric}_change"] = float((values - complete).mean()) if mask.any() else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _recovery_totals(runs: pd.DataFrame) -> dict:
    """Views, run count and summed flagged / recovered counts of some runs."""
    return {"views": ", ".join(dict.fromkeys(runs["recovery_view"])), "runs": len(runs),
            "flagged": int(runs["flagged"].sum()), "recovered": int(runs["recovered"].sum())}


def recovery(runs: pd.DataFrame) -> pd.DataFrame:
    """Flagged and recovered D-cal non-members of the complete method, summed over seeds: per setting,
    per detector and overall (rate = recovered / flagged, NaN when nothing was flagged)."""
    r = runs[runs["variant"] == "calibdcd"]
    rows = [{"dataset": ds, "model": m, "detector": d, **_recovery_totals(g)}
            for (ds, m, d), g in r.groupby(["dataset", "model", "detector"], sort=False)]
    rows += [{"dataset": "all", "model": "all", "detector": d, **_recovery_totals(g)}
             for d, g in r.groupby("detector", sort=False)]
    rows.append({"dataset": "all", "model": "all", "detector": "all", **_recovery_totals(r)})
    out = pd.DataFrame(rows)
    out["recovery_rate"] = (out["recovered"] / out["flagged"]).where(out["flagged"] > 0)
    return out


def view_pressure(views: pd.DataFrame) -> pd.DataFrame:
    """Each controlled view's FPP (mean over seeds) and how often the complete method kept it, per setting."""
    v = views[views["variant"] == "calibdcd"]
    out = v.groupby(["dataset", "model", "detector", "view"], sort=False).agg(
        fpp=("fpp", "mean"), kept=("kept", "sum"), seeds=("seed", "size")).reset_index()
    return out.sort_values(["dataset", "model", "detector", "fpp"], ascending=[True, True, True, False],
                           kind="stable").reset_index(drop=True)


def _cell(value, percent: bool) -> str:
    """One markdown cell: NaN as '-', fractions in % when ``percent``, other floats with 4 digits."""
    if isinstance(value, float) and np.isnan(value):
        return "-"
    if percent:
        return _pct(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def markdown(df: pd.DataFrame, percent: Sequence[str] = (), index: bool = False) -> str:
    """A markdown table; ``percent`` columns (fractions) are shown in % with one decimal."""
    df = df.reset_index() if index else df
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_cell(x, c in percent) for c, x in zip(df.columns, row)) + " |"
              for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def paper_report(scores: list[tuple[str, str, int, pd.DataFrame]], summaries: list[dict], views: pd.DataFrame, *,
                 fpr_targets: Sequence[float], bootstrap: dict, paper_targets: list[dict] = (),
                 baselines: list[tuple[str, str, int, pd.DataFrame]] = (), baseline_methods: Sequence[str] = ()
                 ) -> dict[str, str]:
    """The report of rule ``calibdcd_report``: its markdown and CSV tables, keyed as the rule's outputs.

    ``scores``: every (model, dataset, seed, calibrated scores) run, evaluated with the evaluation
    stage's own metrics (the results table's numbers); ``summaries``: the calibration summaries;
    ``views``: the per-view pressure rows with their run's model, dataset, detector and seed;
    ``baselines``: the passive baselines' (model, dataset, seed, scores) on the same splits, shown
    beside the uncalibrated detectors (``baseline_methods`` their columns); ``paper_targets``: the config's,
    those these tables hold set beside the run's figures (intervals by ``bootstrap``, ``evaluation.bootstrap``).
    """
    tpr5 = fpr_column(0.05)
    targets = sorted(set(fpr_targets) | {0.05})
    per_seed = evaluate_tables(scores, targets)
    runs = pd.DataFrame([row for summary in summaries for row in run_rows(summary)])
    metrics = ["auroc", tpr5]
    main = main_results_long(per_seed, metrics)
    ablation = ablations(per_seed, runs, metrics)
    recovered = recovery(runs)
    pressure = view_pressure(views)
    selection = runs[runs["variant"] == "calibdcd"][["dataset", "model", "detector", "seed", "kept_views", "rank",
                                                       "lam", "basis_dim", "n_supervised", "n_calibration", "n_pool"]]
    pct = [c for c in ablation.columns if c.startswith(("auroc", "tpr"))]
    beside = []
    if baselines:
        both = pd.concat([per_seed, evaluate_tables(list(baselines), targets)], ignore_index=True)
        beside = ["## Uncalibrated detectors beside the likelihood baselines: AUC (same splits)\n\n"
                  + markdown(beside_baselines(both, "auroc", baseline_methods), index=True)]
    merged = merge_tables([*scores, *baselines])
    reproduction = reproduction_rows(computable(list(paper_targets), merged), merged, bootstrap)
    reproduced = ["## Reproduction: the paper's figures beside the run's\n\n"
                  + reproduction_markdown(reproduction, bootstrap["level"])] if len(reproduction) else []
    sections = [
        "# CalibDCD\n\nAUC and TPR@5%FPR in %, mean ± std over seeds, on each seed's evaluation split "
        "(the split every method scores); calibration reads only the supervised labels and known non-members.\n",
        "## Main results: AUC (paper Table 2)\n\n" + markdown(main_results(per_seed, "auroc"), index=True),
        "## Main results: TPR@5%FPR (paper Table 3)\n\n" + markdown(main_results(per_seed, tpr5), index=True),
        *reproduced,
        *beside,
        "## Ablations (paper Table 4; change from CalibDCD on the same runs)\n\n"
        + markdown(ablation.drop(columns="variant"), percent=pct),
        "## False-positive recovery (paper Sec. 5.4)\n\n" + markdown(recovered, percent=["recovery_rate"]),
        "## Selected views and correction (complete method)\n\n" + markdown(selection),
        "## False-positive pressure per view (mean over seeds; kept = seeds that kept it)\n\n" + markdown(pressure),
    ]
    return {"markdown": "\n".join(sections), "main": main.round(4).to_csv(index=False),
            "ablations": ablation.round(4).to_csv(index=False), "recovery": recovered.round(4).to_csv(index=False),
            "selection": selection.to_csv(index=False), "views": pressure.round(5).to_csv(index=False)}
