"""Rule adra_report: per dataset, every reconstruction attack's AUROC summary (top-5 mean, a fixed
primary metric, the best metric) beside the best passive baseline, and AUROC against the RL step."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.adra.report import markdown, per_seed_aurocs, step_curve, step_figure, summary, with_steps
from mialab.core.io import atomic_path, write_text

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
dataset = snakemake.wildcards.dataset  # noqa: F821
tables = [(m, int(s), pd.read_parquet(p)) for (m, s), p in zip(params.runs, inputs.scores)]
per_seed = per_seed_aurocs(dataset, tables, params.fpr_targets)
final_steps: dict[str, dict[str, int]] = {}
for (model, variant), path in zip(params.trains, inputs.logs):
    step = int(pd.read_parquet(path)["step"].max())
    final_steps.setdefault(model, {})
    final_steps[model][variant] = max(step, final_steps[model].get(variant, 0))
table = summary(per_seed, params.primary)
curve = step_curve(table, final_steps)
write_text(markdown(table, dataset, params.primary), output.markdown)
with atomic_path(output.table) as tmp:
    with_steps(table, final_steps).to_csv(tmp, index=False)
with atomic_path(output.steps) as tmp:
    step_figure(curve, table, dataset, str(tmp))
