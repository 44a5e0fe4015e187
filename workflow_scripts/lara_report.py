"""Rule lara_report: LaRA's comparison table with the paper's figures beside the run's, and the layer-wise figure of
one dataset."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import atomic_path, write_text
from mialab.lara.report import lara_markdown, lara_summary, layer_figure

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
dataset = snakemake.wildcards.dataset  # noqa: F821
summary = lara_summary(pd.read_parquet(inputs.per_seed).query("dataset == @dataset"), params.models,
                       params.fpr_targets)
write_text(lara_markdown(summary, params.fpr_targets, pd.read_parquet(inputs.reproduction),
                         params.bootstrap["level"]), output.markdown)
write_text(summary.round(4).to_csv(index=False), output.table)
labels = {path: pd.read_parquet(path, columns=["id", "label"]) for path in dict.fromkeys(inputs.splits)}
metrics = pd.concat([pd.read_parquet(m).assign(model=model, seed=seed).merge(labels[s], on="id", how="left")
                     for (model, seed), m, s in zip(params.runs, inputs.metrics, inputs.splits, strict=True)],
                    ignore_index=True)
with atomic_path(output.layers) as tmp:
    layer_figure(metrics, str(tmp), f"LaRA metrics per layer on {dataset}: members vs non-members")
