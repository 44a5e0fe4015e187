"""Rule prepare_attack: one scoring attack's per-dataset work on every distinct text of every seed's split."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_manifest, write_parquet
from mialab.scoring.attacks import ATTACKS
from mialab.scoring.run import distinct_texts

params, inp, out = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
texts = distinct_texts([pd.read_parquet(p) for p in inp.splits])
table = ATTACKS.get(snakemake.wildcards.attack).prepare(  # noqa: F821
    texts["text"].tolist(), texts["id"].tolist(), dict(params.settings), dict(params.inputs), device=params.device)
write_parquet(table, out.table)
write_manifest({**params.manifest, "rows": len(table)}, out.manifest, outputs=out)
