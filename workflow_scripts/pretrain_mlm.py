"""Rule pretrain_mlm: a small masked LM (BERT) from scratch, VeilProbe's fill-mask model offline."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

from mialab.core.io import atomic_directory
from mialab.lm.loading import resolve_device
from mialab.lm.tiny import save_model
from mialab.training.checkpoints import check_steps, checkpoint_root
from mialab.training.mlm import MLMSettings, corpus_documents, init_mlm, masked_inputs, mlm_blocks, train_tokenizer
from mialab.training.pretrain import pretrain, stage_record
from mialab.training.tokenizer_corpus import corpus_texts

spec = snakemake.params.spec  # noqa: F821
out = snakemake.output  # noqa: F821
checkpoints = checkpoint_root(out.model)
job = Job(out, scratch=[checkpoints])
train = MLMSettings.from_config(spec["train"])
tok = train_tokenizer(corpus_texts(spec["corpora"]), spec["vocab_size"])
blocks = mlm_blocks(corpus_documents(corpus_texts(spec["corpora"])), tok, train.seq_len)
model = init_mlm(tok, spec["architecture"], train.seq_len, train.seed).to(resolve_device())  # CUDA when the job has one
losses = pretrain(model, blocks, train, checkpoint_dir=str(checkpoints), inputs=masked_inputs(tok, train.mask_prob))
steps = check_steps(len(losses), train.steps, f"masked-LM pretraining {out.model}")
with atomic_directory(out.model) as tmp:
    save_model(model, tok, tmp)
record = stage_record(model, blocks, 0, steps, losses)
job.finish({**snakemake.params.manifest, **record, "vocab_size": len(tok)}, out.manifest, timed=False)  # noqa: F821
