"""Rules n_sampling_scores and adra_scores: every reconstruction metric of every rollout, aggregated per
candidate (AoN, BoN) into the attack's score table (columns ``<method>/<metric>@<aon|bon>``)."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.adra.stages import score
from mialab.io import write_json, write_parquet

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
per_rollout, scores = score(pd.read_parquet(inputs.rollouts), pd.read_parquet(inputs.split), params.method,
                            params.manifest["config"])
write_parquet(per_rollout, output.rollout_metrics)
write_parquet(scores, output.scores)
write_json({**params.manifest, "rows": len(scores), "columns": list(scores.columns)}, output.manifest)
