"""Rule lara_features: mean-pooled hidden states of every distinct text of the seeds' perturbation
tables (resumable shards)."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import os

import pandas as pd

from mialab.lara.features import extract_features
from mialab.lara.stages import distinct_texts
from mialab.lm.loading import trusts_remote_code

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
spec = params.spec
job = Job(output)
texts = distinct_texts(pd.concat([pd.read_parquet(p) for p in inputs.tables], ignore_index=True))
index = extract_features(texts, params.model_path, os.path.dirname(output.index), shard_size=spec["shard_size"],
                         device=spec["device"], dtype=spec["dtype"], max_length=spec.get("max_length"),
                         special_tokens=spec["special_tokens"],
                         trust_remote_code=trusts_remote_code(snakemake.config, snakemake.wildcards.model))  # noqa: F821
job.finish({**params.manifest, "texts": len(index), "shards": int(index["shard"].nunique())}, output.manifest)
