"""Rule pretrain_model: the tiny base model (or the no-members control) from scratch."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import atomic_directory
from mialab.data.sources import read_text
from mialab.lm.loading import load_tokenizer, resolve_device
from mialab.lm.tiny import init_model, save_model
from mialab.training.checkpoints import check_steps, checkpoint_root
from mialab.training.pretrain import (
    PretrainSettings,
    pack_blocks,
    pretrain,
    stage_config,
    stage_documents,
    stage_record,
)

spec = snakemake.params.spec  # noqa: F821
out = snakemake.output  # noqa: F821
checkpoints = checkpoint_root(out.model)
job = Job(out, scratch=[checkpoints])
train = PretrainSettings.from_config(spec["train"])
tok = load_tokenizer(snakemake.input.tokenizer)  # noqa: F821
docs, member_documents = stage_documents(snakemake.wildcards.model, read_text(snakemake.input.filler),  # noqa: F821
                                         [pd.read_parquet(p) for p in snakemake.input.member_pools],  # noqa: F821
                                         spec, seed=train.seed)
blocks = pack_blocks(docs, tok, train.seq_len)
model = init_model(stage_config(tok, spec["architecture"], train.seq_len), train.seed).to(resolve_device())  # CUDA when the job has one
losses = pretrain(model, blocks, train, checkpoint_dir=str(checkpoints))
steps = check_steps(len(losses), train.steps, f"pretraining {out.model}")
with atomic_directory(out.model) as tmp:
    save_model(model, tok, tmp)
record = stage_record(model, blocks, member_documents, steps, losses)
job.finish({**snakemake.params.manifest, **record}, out.manifest, timed=False)  # noqa: F821
