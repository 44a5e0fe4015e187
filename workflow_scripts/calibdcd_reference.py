"""Rule calibdcd_reference: DPDLLM's reference model, fine-tuned on every text of a pool."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import time

import pandas as pd

from mialab.calibdcd.reference import FinetuneConfig, finetune_reference
from mialab.core.io import write_manifest

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
start = time.perf_counter()
texts = pd.read_parquet(inputs.pool, columns=["text"])["text"].astype(str).tolist()  # no label is read
log = finetune_reference(params.base, texts, output.model, length=params.length,
                         config=FinetuneConfig(**params.finetune), device=params.device)
write_manifest({**params.manifest, **log, "seconds": round(time.perf_counter() - start, 1)}, output.manifest,
               outputs=output)
