"""Rule calibdcd_reference: DPDLLM's reference model, fine-tuned on every text of a pool."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.calibdcd.reference import FinetuneConfig, finetune_reference

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
job = Job(output)
texts = pd.read_parquet(inputs.pool, columns=["text"])["text"].astype(str).tolist()  # no label is read
log = finetune_reference(params.base, texts, output.model, length=params.length,
                         config=FinetuneConfig(**params.finetune), device=params.device)
job.finish({**params.manifest, **log}, output.manifest)
