"""Rule evaluate_dataset: AUROC and TPR@FPR of every method and model on one dataset, the headline
rows (bootstrap intervals, paired tests), the paper targets' rows, low-FPR ROC plots of the headline methods."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import atomic_path, write_parquet
from mialab.evaluation.headline import headline_table
from mialab.evaluation.report import roc_figure
from mialab.evaluation.reproduction import reproduction_rows
from mialab.evaluation.stage import evaluate_tables, merge_tables, roc_panels, summarise

params = snakemake.params  # noqa: F821
dataset = snakemake.wildcards.dataset  # noqa: F821
targets = params.fpr_targets
tables = merge_tables([(m, dataset, int(s), pd.read_parquet(p))
                       for (m, s), p in zip(params.runs, snakemake.input.scores)])  # noqa: F821
per_seed = evaluate_tables(tables, targets)
write_parquet(per_seed, snakemake.output.per_seed)  # noqa: F821
write_parquet(summarise(per_seed, targets), snakemake.output.summary)  # noqa: F821
write_parquet(headline_table(tables, params.headline, params.baseline, targets, params.bootstrap),
              snakemake.output.headline)  # noqa: F821
write_parquet(reproduction_rows(params.paper_targets, tables, params.bootstrap),
              snakemake.output.reproduction)  # noqa: F821
with atomic_path(snakemake.output.roc) as tmp:  # noqa: F821
    roc_figure(roc_panels(tables), params.headline, dataset, str(tmp))
