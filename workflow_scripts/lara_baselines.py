"""Rule lara_baselines: ReCaLL, CDD and Self-Critique of the evaluated questions, a table per seed; the
generated baselines resume from the parts of a killed attempt (``manifest.json.parts/`` in the stage folder,
removed once the outputs are written)."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_parquet
from mialab.lara.stages import baseline_scores
from mialab.lm.engine import parts_folder
from mialab.lm.loading import trusts_remote_code

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
parts = parts_folder(output.manifest)
job = Job(output, scratch=[parts])
tables = baseline_scores(params.model_path, [pd.read_parquet(p) for p in inputs.tables], **params.spec,
                         trust_remote_code=trusts_remote_code(snakemake.config, snakemake.wildcards.model),  # noqa: F821
                         parts=parts)
for table, path in zip(tables, output.scores, strict=True):
    write_parquet(table, path)
job.finish({**params.manifest, "rows": [len(t) for t in tables]}, output.manifest)
