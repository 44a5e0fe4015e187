"""Rule score_baselines: passive membership scores of one model on one split."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.io import write_json, write_parquet
from mialab.scoring.run import score_split

params = snakemake.params  # noqa: F821
split = pd.read_parquet(snakemake.input.split)  # noqa: F821
ref = pd.read_parquet(snakemake.input.reference) if snakemake.input.get("reference") else None  # noqa: F821
scores = score_split(params.model_path, split, params.spec, reference_scores=ref)
write_parquet(scores, snakemake.output.scores)  # noqa: F821
write_json({**params.manifest, "rows": len(scores), "columns": list(scores.columns)}, snakemake.output.manifest)  # noqa: F821
