"""Rule adra_report: per dataset, every reconstruction attack's AUROC summary (top-5 mean, a fixed
primary metric, the best metric) beside the best passive baseline, AUROC against the RL step, and the paper's
figures beside the run's."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.adra.report import markdown, report, step_figure
from mialab.core.io import atomic_path, write_text

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
dataset = snakemake.wildcards.dataset  # noqa: F821
tables = [(m, int(s), pd.read_parquet(p)) for (m, s), p in zip(params.runs, inputs.scores)]
logs = [pd.read_parquet(path) for path in inputs.logs]
table, with_steps, curve, reproduction = report(dataset, tables, params.trains, logs, params.fpr_targets,
                                               params.primary, params.paper_targets, params.bootstrap)
write_text(markdown(table, dataset, params.primary, reproduction, params.bootstrap["level"]), output.markdown)
with atomic_path(output.table) as tmp:
    with_steps.to_csv(tmp, index=False)
with atomic_path(output.steps) as tmp:
    step_figure(curve, table, dataset, str(tmp))
