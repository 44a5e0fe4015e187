"""Rule lara_scores: RSM / DC / RSI per layer, the LaRA detection score, LaRA + Self-Critique (a table per seed)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import os

import pandas as pd

from mialab.core.io import write_manifest, write_parquet
from mialab.lara.features import load_features
from mialab.lara.stages import question_metrics, score_table

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
index, features = load_features(os.path.dirname(inputs.index))
rows = []
for split, table, baselines, scores_path, metrics_path in zip(inputs.splits, inputs.tables, inputs.baselines,
                                                              output.scores, output.metrics, strict=True):
    metrics = question_metrics(pd.read_parquet(table), index, features)
    scores = score_table(metrics, pd.read_parquet(baselines), pd.read_parquet(split),
                         **params.detection, betas=params.betas)
    write_parquet(metrics, metrics_path)
    write_parquet(scores, scores_path)
    rows.append(len(scores))
write_manifest({**params.manifest, "rows": rows, "columns": list(scores.columns)}, output.manifest, outputs=output)
