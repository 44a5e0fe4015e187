"""Rule calibdcd_report: the CalibDCD paper's tables (main results, ablations, recovery) for this run, and the
paper's figures beside the run's."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import json
from pathlib import Path

import pandas as pd

from mialab.calibdcd.report import paper_report
from mialab.core.io import write_text

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
scores = [(m, d, int(s), pd.read_parquet(p)) for (m, d, _, s), p in zip(params.runs, inputs.scores)]
baselines = [(m, d, int(s), pd.read_parquet(p)) for (m, d, s), p in zip(params.baseline_runs, inputs.baselines)]
views = pd.concat([pd.read_parquet(p).assign(model=m, dataset=d, detector=det, seed=int(s))
                   for (m, d, det, s), p in zip(params.runs, inputs.views)], ignore_index=True)
report = paper_report(scores, [json.loads(Path(p).read_text()) for p in inputs.summaries], views,
                      fpr_targets=params.fpr_targets, bootstrap=params.bootstrap, paper_targets=params.paper_targets,
                      baselines=baselines, baseline_methods=params.baselines)
for name, text in report.items():
    write_text(text, output[name])
