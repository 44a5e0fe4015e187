"""Rule calibdcd_report: the CalibDCD paper's tables (main results, ablations, recovery) for this run."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import json
from pathlib import Path

import pandas as pd

from mialab.calibdcd import report as tables
from mialab.core.io import write_text
from mialab.evaluation.metrics import fpr_column
from mialab.evaluation.stage import evaluate_tables

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
tpr5 = fpr_column(0.05)
targets = sorted(set(params.fpr_targets) | {0.05})
per_seed = evaluate_tables([(m, d, int(s), pd.read_parquet(p)) for (m, d, _, s), p in zip(params.runs, inputs.scores)],
                           targets)  # the evaluation stage's own metrics: the results table's numbers
baselines = evaluate_tables([(m, d, int(s), pd.read_parquet(p)) for (m, d, s), p in
                             zip(params.baseline_runs, inputs.baselines)], targets) if inputs.baselines else None
runs = pd.DataFrame([row for path in inputs.summaries for row in tables.run_rows(json.loads(Path(path).read_text()))])
views = pd.concat([pd.read_parquet(p).assign(model=m, dataset=d, detector=det, seed=int(s))
                   for (m, d, det, s), p in zip(params.runs, inputs.views)], ignore_index=True)
metrics = ["auroc", tpr5]
main = tables.main_results_long(per_seed, metrics)
ablations = tables.ablations(per_seed, runs, metrics)
recovery = tables.recovery(runs)
pressure = tables.view_pressure(views)
selection = runs[runs["variant"] == "calibdcd"][["dataset", "model", "detector", "seed", "kept_views", "rank", "lam",
                                                   "basis_dim", "n_supervised", "n_calibration", "n_pool"]]
pct = [c for c in ablations.columns if c.startswith(("auroc", "tpr"))]
sections = [
    "# CalibDCD\n\nAUC and TPR@5%FPR in %, mean ± std over seeds, on each seed's evaluation split "
    "(the split every method scores); calibration reads only the supervised labels and known non-members.\n",
    "## Main results: AUC (paper Table 2)\n\n" + tables.markdown(tables.main_results(per_seed, "auroc"), index=True),
    "## Main results: TPR@5%FPR (paper Table 3)\n\n" + tables.markdown(tables.main_results(per_seed, tpr5), index=True),
    *(["## Uncalibrated detectors beside the likelihood baselines: AUC (same splits)\n\n"
       + tables.markdown(tables.beside_baselines(pd.concat([per_seed, baselines], ignore_index=True), "auroc",
                                                 params.baselines), index=True)] if baselines is not None else []),
    "## Ablations (paper Table 4; change from CalibDCD on the same runs)\n\n"
    + tables.markdown(ablations.drop(columns="variant"), percent=pct),
    "## False-positive recovery (paper Sec. 5.4)\n\n" + tables.markdown(recovery, percent=["recovery_rate"]),
    "## Selected views and correction (complete method)\n\n" + tables.markdown(selection),
    "## False-positive pressure per view (mean over seeds; kept = seeds that kept it)\n\n" + tables.markdown(pressure),
]
write_text("\n".join(sections), output.markdown)
write_text(main.round(4).to_csv(index=False), output.main)
write_text(ablations.round(4).to_csv(index=False), output.ablations)
write_text(recovery.round(4).to_csv(index=False), output.recovery)
write_text(selection.to_csv(index=False), output.selection)
write_text(pressure.round(5).to_csv(index=False), output.views)
