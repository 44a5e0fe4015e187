"""Rule pretrain_model: the tiny base model (or the no-members control) from scratch."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import shutil

import pandas as pd

from mialab.core.io import atomic_directory, remove_stale_temporaries, write_manifest
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
remove_stale_temporaries(out.model, out.manifest)  # left by a killed earlier attempt
checkpoints = checkpoint_root(out.model)
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
write_manifest({**snakemake.params.manifest, **record}, out.manifest, outputs=out)  # noqa: F821
shutil.rmtree(checkpoints, ignore_errors=True)
