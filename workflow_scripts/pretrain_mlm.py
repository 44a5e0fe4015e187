"""Rule pretrain_mlm: a small masked LM (BERT) from scratch, VeilProbe's fill-mask model offline."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import shutil

from mialab.core.io import atomic_directory, remove_stale_temporaries, write_manifest
from mialab.lm.loading import resolve_device
from mialab.lm.tiny import save_model
from mialab.training.checkpoints import check_steps, checkpoint_root
from mialab.training.mlm import MLMSettings, corpus_documents, init_mlm, masked_inputs, mlm_blocks, train_tokenizer
from mialab.training.pretrain import pretrain, stage_record
from mialab.training.tokenizer_corpus import corpus_texts

spec = snakemake.params.spec  # noqa: F821
out = snakemake.output  # noqa: F821
remove_stale_temporaries(out.model, out.manifest)  # left by a killed earlier attempt
checkpoints = checkpoint_root(out.model)
train = MLMSettings.from_config(spec["train"])
tok = train_tokenizer(corpus_texts(spec["corpora"]), spec["vocab_size"])
blocks = mlm_blocks(corpus_documents(corpus_texts(spec["corpora"])), tok, train.seq_len)
model = init_mlm(tok, spec["architecture"], train.seq_len, train.seed).to(resolve_device())  # CUDA when the job has one
losses = pretrain(model, blocks, train, checkpoint_dir=str(checkpoints), inputs=masked_inputs(tok, train.mask_prob))
steps = check_steps(len(losses), train.steps, f"masked-LM pretraining {out.model}")
with atomic_directory(out.model) as tmp:
    save_model(model, tok, tmp)
record = stage_record(model, blocks, 0, steps, losses)
write_manifest({**snakemake.params.manifest, **record, "vocab_size": len(tok)}, out.manifest,  # noqa: F821
               outputs=out)
shutil.rmtree(checkpoints, ignore_errors=True)
