"""Rule rehearsal_model: the tiny stand-in of one hub model (mialab.pipeline.rehearsal.build_stand_in)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

from mialab.core.io import atomic_directory, write_manifest
from mialab.pipeline.rehearsal import TOKENIZER_CORPUS, build_stand_in
from mialab.training.tokenizer_corpus import corpus_texts

manifest = snakemake.params.manifest  # noqa: F821
with atomic_directory(snakemake.output.model) as tmp:  # noqa: F821
    n_params = build_stand_in(manifest["spec"], tmp, corpus_texts(TOKENIZER_CORPUS))
write_manifest({**manifest, "n_parameters": n_params}, snakemake.output.manifest,  # noqa: F821
               outputs=snakemake.output)  # noqa: F821
