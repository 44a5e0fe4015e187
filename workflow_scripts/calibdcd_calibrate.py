"""Rule calibdcd_calibrate: CalibDCD (every variant) for every detector and seed of a (model, dataset);
a (detector, seed)'s score table for the evaluation."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.calibdcd.stages import calibrate_detectors
from mialab.core.io import write_json, write_manifest, write_parquet

wc, params, inputs, output = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output  # noqa: F821
seeds = [{"seed": int(seed), "supervised": pd.read_parquet(inputs.supervised[i]),
          "calibration": pd.read_parquet(inputs.calibration[i])["id"].tolist(),
          "evaluation": pd.read_parquet(inputs.evaluation[i])["id"].tolist(),
          "split": pd.read_parquet(inputs.splits[i], columns=["id", "label"])} for i, seed in enumerate(params.seeds)]
features = ((pd.read_parquet(o), pd.read_parquet(v)) for o, v in zip(inputs.original, inputs.views, strict=True))
rows = {}
for j, (detector, seed, run, scores) in enumerate(calibrate_detectors(features, seeds, detectors=params.detectors,
                                                                       spec=params.spec)):
    write_parquet(scores, output.scores[j])
    write_parquet(run.views, output.views[j])
    write_parquet(run.objective, output.objective[j])
    write_json({"model": wc.model, "dataset": wc.dataset, "detector": detector, "seed": seed,
                "variants": run.summaries}, output.summary[j])
    rows[f"{detector}/seed-{seed}"] = len(run.scores)
write_manifest({**params.manifest, "rows": rows}, output.manifest, outputs=output)
