"""Rule score_baselines: passive membership scores of one model on every seed's split of a dataset."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_manifest, write_parquet
from mialab.lm.loading import trusts_remote_code
from mialab.scoring.run import score_splits

params, inp, out = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
splits = [pd.read_parquet(p) for p in inp.splits]
refs = [pd.read_parquet(p) for p in inp.reference] if inp.get("reference") else None
tables = score_splits(params.model_path, splits, params.spec, reference_scores=refs,
                      trust_remote_code=trusts_remote_code(snakemake.config, snakemake.wildcards.model),  # noqa: F821
                      attack_inputs=params.attack_inputs)
for table, path in zip(tables, out.scores):
    write_parquet(table, path)
write_manifest({**params.manifest, "rows": [len(t) for t in tables], "columns": list(tables[0].columns)}, out.manifest,
               outputs=out)
