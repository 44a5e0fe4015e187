"""Rules n_sampling_rollouts and adra_eval: N sampled rollouts of every candidate of each split (one
per seed, each under its own sampling seed), from the target model (N-Sampling), its untrained copy
sampled like ADRA, or a trained ADRA policy snapshot; resumable from the parts of a killed attempt
(``<rollouts>.parts/``, removed once the outputs are written)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import os
import time

import pandas as pd

from mialab.adra.stages import policy_rollouts
from mialab.core.io import remove_stale_temporaries, write_manifest
from mialab.lm.engine import Parts, parts_folder, write_rollouts
from mialab.lm.loading import trusts_remote_code
from mialab.n_sampling.tasks import Task

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
config = params.manifest["config"]
snapshot = params.manifest.get("snapshot")
start = time.perf_counter()
remove_stale_temporaries(*output.rollouts, output.manifest)  # left by a killed earlier attempt
parts = [parts_folder(p) for p in output.rollouts]
tables = policy_rollouts(params.model_path, os.path.join(inputs.adapters, snapshot) if snapshot else None,
                         [pd.read_parquet(p) for p in inputs.splits], Task.from_config(config["task"]),
                         prompt_format=config["prompt_format"], samplings=list(params.samplings),
                         backend=config["backend"],
                         backend_options=config["backend_options"], parts=parts,
                         trust_remote_code=trusts_remote_code(snakemake.config, snakemake.wildcards.model))  # noqa: F821
for rollouts, path in zip(tables, output.rollouts, strict=True):
    write_rollouts(rollouts, path)
for folder in parts:
    Parts(folder).remove()
write_manifest({**params.manifest, "rows": [len(t) for t in tables],
               "mean_tokens": [float(t["n_tokens"].mean()) for t in tables],
               "seconds": round(time.perf_counter() - start, 1)}, output.manifest, outputs=output)
