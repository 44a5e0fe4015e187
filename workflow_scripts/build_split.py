"""Rule build_split: draw one seed's balanced member/non-member split from a pool."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_manifest, write_parquet
from mialab.data.sampling import sample_split
from mialab.data.schema import validate_split

wc, params = snakemake.wildcards, snakemake.params  # noqa: F821
name = f"dataset {wc.dataset!r} seed {wc.seed}"
pool = validate_split(pd.read_parquet(snakemake.input.pool), name=f"{name} pool")  # noqa: F821
split = validate_split(sample_split(pool, params.spec["n_per_class"], int(wc.seed), name=f"dataset {wc.dataset!r}",
                                    n_key=f"datasets.{wc.dataset}.split.n_per_class"), name=f"{name} split")
write_parquet(split, snakemake.output.split)  # noqa: F821
write_manifest({**params.manifest, "rows": len(split), "members": int(split["label"].sum())},
               snakemake.output.manifest, outputs=snakemake.output)  # noqa: F821
