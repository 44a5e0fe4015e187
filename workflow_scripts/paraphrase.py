"""Rules paraphrase (a split) and paraphrase_pool (a pool's members): the paraphrased setting of one split or pool."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_manifest, write_parquet
from mialab.data.paraphrase import paraphrased_pool, paraphrased_split, paraphraser_for

params, output, wc = snakemake.params, snakemake.output, snakemake.wildcards  # noqa: F821
paraphraser = paraphraser_for(params.spec, family=params.family)
if "split" in output.keys():
    out, info = paraphrased_split(pd.read_parquet(snakemake.input.split), paraphraser,  # noqa: F821
                                  name=f"dataset {wc.dataset!r} seed {wc.seed}")
    path = output.split
else:
    out, info = paraphrased_pool(pd.read_parquet(snakemake.input.pool), paraphraser,  # noqa: F821
                                 name=f"dataset {wc.dataset!r} pool")
    path = output.pool
print({k: v for k, v in info.items() if k != "paraphraser"})
write_parquet(out, path)
write_manifest({**params.manifest, "paraphrase": info}, output.manifest, outputs=output)
