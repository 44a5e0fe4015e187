"""Rules n_sampling_rollouts and adra_eval: N sampled rollouts of every candidate of each split (one
per seed, each under its own sampling seed), from the target model (N-Sampling), its untrained copy
sampled like ADRA, or a trained ADRA policy snapshot; resumable from the parts of a killed attempt
(``<rollouts>.parts/``, removed once the outputs are written)."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import os

import pandas as pd

from mialab.adra.stages import policy_rollouts
from mialab.lm.engine import parts_folder, write_rollouts
from mialab.lm.loading import trusts_remote_code
from mialab.n_sampling.tasks import Task

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
config = params.manifest["config"]
snapshot = params.manifest.get("snapshot")
parts = [parts_folder(p) for p in output.rollouts]
job = Job(output, scratch=parts)
tables = policy_rollouts(params.model_path, os.path.join(inputs.adapters, snapshot) if snapshot else None,
                         [pd.read_parquet(p) for p in inputs.splits], Task.from_config(config["task"]),
                         prompt_format=config["prompt_format"], samplings=list(params.samplings),
                         backend=config["backend"],
                         backend_options=config["backend_options"], parts=parts,
                         trust_remote_code=trusts_remote_code(snakemake.config, snakemake.wildcards.model))  # noqa: F821
for rollouts, path in zip(tables, output.rollouts, strict=True):
    write_rollouts(rollouts, path)
job.finish({**params.manifest, "rows": [len(t) for t in tables],
            "mean_tokens": [float(t["n_tokens"].mean()) for t in tables]}, output.manifest)
