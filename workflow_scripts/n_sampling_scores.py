"""Rules n_sampling_scores and adra_scores: every reconstruction metric of every rollout, aggregated per
candidate (AoN, BoN) into the attack's score table (columns ``<method>/<metric>@<aon|bon>``), for each
split (one per seed) and its rollouts."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_manifest, write_parquet
from mialab.n_sampling.stages import score

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
rows = []
for split, rollouts, scores_path, metrics_path in zip(inputs.splits, inputs.rollouts, output.scores,
                                                      output.rollout_metrics, strict=True):
    per_rollout, scores = score(pd.read_parquet(rollouts), pd.read_parquet(split), params.method,
                                params.manifest["config"])
    write_parquet(per_rollout, metrics_path)
    write_parquet(scores, scores_path)
    rows.append(len(scores))
write_manifest({**params.manifest, "rows": rows, "columns": list(scores.columns)}, output.manifest, outputs=output)
