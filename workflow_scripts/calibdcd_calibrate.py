"""Rule calibdcd_calibrate: CalibDCD (every variant) for one detector and seed; the evaluation's score table."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.calibdcd.stages import attach_labels, calibrate_variants
from mialab.io import write_json, write_parquet

wc, params, inputs, output = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output  # noqa: F821
spec = params.spec
run = calibrate_variants(
    pd.read_parquet(inputs.original), pd.read_parquet(inputs.views), pd.read_parquet(inputs.supervised),
    pd.read_parquet(inputs.calibration)["id"].tolist(), pd.read_parquet(inputs.evaluation)["id"].tolist(),
    detector=wc.detector, variants=spec["variants"], tau=spec["tau"], tolerance=spec["tolerance"], seed=int(wc.seed))
# every score is fixed; only now the evaluation labels join the table (for the evaluation stage)
write_parquet(attach_labels(run.scores, pd.read_parquet(inputs.split, columns=["id", "label"])), output.scores)
write_parquet(run.views, output.views)
write_parquet(run.objective, output.objective)
write_json({"model": wc.model, "dataset": wc.dataset, "detector": wc.detector, "seed": int(wc.seed),
            "variants": run.summaries}, output.summary)
write_json({**params.manifest, "rows": len(run.scores), "columns": list(run.scores.columns)}, output.manifest)
