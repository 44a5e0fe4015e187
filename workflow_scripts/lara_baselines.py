"""Rule lara_baselines: ReCaLL, CDD and Self-Critique of the evaluated questions, a table per seed; the
generated baselines resume from the parts of a killed attempt (``manifest.json.parts/`` in the stage folder,
removed once the outputs are written)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import time

import pandas as pd

from mialab.core.io import remove_stale_temporaries, write_manifest, write_parquet
from mialab.lara.stages import baseline_scores
from mialab.lm.engine import Parts, parts_folder
from mialab.lm.loading import trusts_remote_code

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
start = time.perf_counter()
remove_stale_temporaries(*output.scores, output.manifest)  # left by a killed earlier attempt
parts = parts_folder(output.manifest)
tables = baseline_scores(params.model_path, [pd.read_parquet(p) for p in inputs.tables], **params.spec,
                         trust_remote_code=trusts_remote_code(snakemake.config, snakemake.wildcards.model),  # noqa: F821
                         parts=parts)
for table, path in zip(tables, output.scores, strict=True):
    write_parquet(table, path)
Parts(parts).remove()
write_manifest({**params.manifest, "rows": [len(t) for t in tables], "seconds": round(time.perf_counter() - start, 1)},
               output.manifest, outputs=output)
