"""Rule rehearsal_model: the tiny stand-in of one hub model (mialab.rehearsal.build_stand_in)."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

from mialab.io import atomic_directory, write_manifest
from mialab.models.tokenizer_corpus import corpus_texts
from mialab.rehearsal import TOKENIZER_CORPUS, build_stand_in

manifest = snakemake.params.manifest  # noqa: F821
with atomic_directory(snakemake.output.model) as tmp:  # noqa: F821
    n_params = build_stand_in(manifest["spec"], tmp, corpus_texts(TOKENIZER_CORPUS))
write_manifest({**manifest, "n_parameters": n_params}, snakemake.output.manifest,  # noqa: F821
               outputs=snakemake.output)  # noqa: F821
