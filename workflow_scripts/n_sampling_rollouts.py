"""Rules n_sampling_rollouts and adra_eval: N sampled rollouts of every candidate of a split, from the
target model (N-Sampling), its untrained copy sampled like ADRA, or a trained ADRA policy snapshot."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import os
import time

import pandas as pd

from mialab.adra.stages import policy_rollouts
from mialab.adra.tasks import Task
from mialab.generation.engine import write_rollouts
from mialab.io import write_json

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
config = params.manifest["config"]
snapshot = params.manifest.get("snapshot")
start = time.perf_counter()
rollouts = policy_rollouts(params.model_path, os.path.join(inputs.adapters, snapshot) if snapshot else None,
                           pd.read_parquet(inputs.split), Task.from_config(config["task"]), chat=config["chat"],
                           sampling=config["sampling"], backend=config["backend"],
                           backend_options=config["backend_options"])
write_rollouts(rollouts, output.rollouts)
write_json({**params.manifest, "rows": len(rollouts), "mean_tokens": float(rollouts["n_tokens"].mean()),
            "seconds": round(time.perf_counter() - start, 1)}, output.manifest)
