"""Rule calibdcd_partition: one seed's supervised split and known non-members D-cal, around its common split."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.calibdcd.stages import partition_around_split
from mialab.core.io import write_manifest, write_parquet

wc, spec = snakemake.wildcards, snakemake.params.spec  # noqa: F821
pool = pd.read_parquet(snakemake.input.pool)  # noqa: F821
split_ids = pd.read_parquet(snakemake.input.split, columns=["id"])["id"]  # noqa: F821  (ids only: no label)
parts = partition_around_split(pool, split_ids, seed=int(wc.seed), n_train_per_class=spec["n_train_per_class"],
                               n_calibration=spec["n_calibration"], name=f"dataset {wc.dataset!r} seed {wc.seed}")
for name, frame in parts.items():
    write_parquet(frame, snakemake.output[name])  # noqa: F821
write_manifest({**snakemake.params.manifest, **{f"n_{k}": len(v) for k, v in parts.items()}},  # noqa: F821
               snakemake.output.manifest, outputs=snakemake.output)  # noqa: F821
