"""Rule train_tokenizer: byte-level BPE on the configured corpora (all classes alike)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

from mialab.core.io import atomic_directory, write_manifest
from mialab.lm.tiny import train_tokenizer
from mialab.training.tokenizer_corpus import corpus_texts

spec = snakemake.params.spec  # noqa: F821
tok = train_tokenizer(corpus_texts(spec["corpora"]), vocab_size=spec["vocab_size"])
with atomic_directory(snakemake.output.tokenizer) as tmp:  # noqa: F821
    tok.save_pretrained(tmp)
write_manifest({**snakemake.params.manifest, "vocab_size": len(tok)}, snakemake.output.manifest,  # noqa: F821
               outputs=snakemake.output)  # noqa: F821
