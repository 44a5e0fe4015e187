"""Rule build_pool: read a raw corpus through its family and write every candidate as parquet."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821 (injected by Snakemake)

from mialab.core.io import write_manifest, write_parquet
from mialab.data.registry import build_pool
from mialab.data.schema import validate_split

spec = snakemake.params.spec  # noqa: F821
dataset = snakemake.wildcards.dataset  # noqa: F821
pool, repeats = build_pool(spec)
pool = validate_split(pool, name=f"dataset {dataset!r} pool ({spec['source']})")
write_parquet(pool, snakemake.output.pool)  # noqa: F821
write_manifest({**snakemake.params.manifest, "rows": len(pool), "members": int(pool["label"].sum()),  # noqa: F821
                "exact_repeats_dropped": repeats}, snakemake.output.manifest, outputs=snakemake.output)  # noqa: F821
