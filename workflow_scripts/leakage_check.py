"""Rule leakage_check: duplicate, blind-baseline and length checks of one split."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.data.leakage import report_row, run_check
from mialab.data.schema import validate_split
from mialab.io import write_json, write_parquet

wc, params, output = snakemake.wildcards, snakemake.params, snakemake.output  # noqa: F821
seed, name = int(wc.seed), f"dataset {wc.dataset!r} seed {wc.seed}"
split = validate_split(pd.read_parquet(snakemake.input.split), name=f"{name} split")  # noqa: F821
setting = str(split["setting"].iloc[0]) if "setting" in split.columns else "original"
report = run_check(split, params.options, seed=seed, name=name)  # LeakageError names the ids
row = report_row(report, dataset=wc.dataset, seed=seed, setting=setting)
print(row)
write_json({"dataset": wc.dataset, "seed": seed, "setting": setting, "options": params.options, **report},
           output.details)
write_parquet(pd.DataFrame([row]), output.table)
write_json(params.manifest, output.manifest)
