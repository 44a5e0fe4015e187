"""Rule leakage_check: duplicate, blind-baseline and length checks of every seed's split of a dataset."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.checks.leakage import report_row, run_check, seed_overlaps, split_embeddings
from mialab.core.io import write_json, write_manifest, write_parquet
from mialab.data.schema import validate_split

wc, params, inputs, output = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output  # noqa: F821
seeds = [int(s) for s in params.seeds]
names = [f"dataset {wc.dataset!r} seed {seed}" for seed in seeds]
splits = [validate_split(pd.read_parquet(path), name=f"{name} split") for path, name in zip(inputs.splits, names)]
embeddings = split_embeddings(splits, params.options)
for split, emb, shared, seed, name, details, table in zip(splits, embeddings, seed_overlaps(splits), seeds, names,
                                                          output.details, output.tables, strict=True):
    setting = str(split["setting"].iloc[0]) if "setting" in split.columns else "original"
    report = run_check(split, params.options, seed=seed, name=name, embeddings=emb)  # LeakageError names the ids
    row = report_row(report, dataset=wc.dataset, seed=seed, shared=shared, overlap_warn=params.options["overlap_warn"],
                     setting=setting)
    print(row)
    write_json({"dataset": wc.dataset, "seed": seed, "setting": setting, "options": params.options, **report}, details)
    write_parquet(pd.DataFrame([row]), table)
write_manifest(params.manifest, output.manifest, outputs=output)
