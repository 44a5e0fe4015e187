"""Rule calibdcd_veilprobe: VeilProbe's two mapping models of a (target, pool) and its features of both scopes."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import os

import pandas as pd

from mialab.calibdcd.mapping import MappingConfig
from mialab.calibdcd.stages import DETECTOR_INPUTS, veilprobe_tables
from mialab.core.io import write_parquet
from mialab.lm.embeddings import resolve_model_path
from mialab.lm.loading import resolve_device

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
job = Job(output)
spec = dict(params.mapping)
tokenizer = resolve_model_path(spec.pop("tokenizer"))   # the packaged MiniLM: bert-base-uncased's vocabulary
vocab_size = spec.pop("vocab_size")                      # or one trained on the pairs' texts
ids = list(dict.fromkeys(i for p in inputs.calibration for i in pd.read_parquet(p)["id"].astype(str)))
os.makedirs(output.mapping, exist_ok=True)
run = veilprobe_tables(pd.read_parquet(inputs.generations), ids, params.views, tokenizer=tokenizer,
                       mapping=MappingConfig(**spec), vocab_size=vocab_size,
                       folders={c: os.path.join(output.mapping, c) for c in DETECTOR_INPUTS["veilprobe"]},
                       device=resolve_device(params.lm["device"]))
write_parquet(run.original, output.original)
write_parquet(run.views, output.views)
job.finish({**params.manifest, "texts": len(run.original), "calibration": len(ids), "training": run.logs},
           output.manifest)
