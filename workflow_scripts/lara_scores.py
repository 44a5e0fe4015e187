"""Rule lara_scores: RSM / DC / RSI per layer, the LaRA detection score, LaRA + Self-Critique."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import os

import pandas as pd

from mialab.io import write_json, write_parquet
from mialab.lara.features import load_features
from mialab.lara.stages import question_metrics, score_table

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
index, features = load_features(os.path.dirname(inputs.index))
metrics = question_metrics(pd.read_parquet(inputs.table), index, features)
scores = score_table(metrics, pd.read_parquet(inputs.baselines), pd.read_parquet(inputs.split),
                     how=params.detection["how"], betas=params.betas)
write_parquet(metrics, output.metrics)
write_parquet(scores, output.scores)
write_json({**params.manifest, "rows": len(scores), "columns": list(scores.columns)}, output.manifest)
