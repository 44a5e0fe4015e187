"""Rule calibdcd_calibrate: CalibDCD (every variant) for every detector and seed of a (model, dataset);
a (detector, seed)'s score table for the evaluation."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.calibdcd.stages import attach_labels, calibrate_variants
from mialab.core.io import write_json, write_manifest, write_parquet

wc, params, inputs, output = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output  # noqa: F821
spec, seeds = params.spec, list(params.seeds)
rows = {}
for d, detector in enumerate(params.detectors):
    original, views = pd.read_parquet(inputs.original[d]), pd.read_parquet(inputs.views[d])
    for i, seed in enumerate(seeds):
        run = calibrate_variants(
            original, views, pd.read_parquet(inputs.supervised[i]), pd.read_parquet(inputs.calibration[i])["id"].tolist(),
            pd.read_parquet(inputs.evaluation[i])["id"].tolist(), detector=detector, variants=spec["variants"],
            tau=spec["tau"], tolerance=spec["tolerance"], seed=int(seed))
        j = d * len(seeds) + i     # outputs are detector-major
        # every score is fixed; only now the evaluation labels join the table (for the evaluation stage)
        write_parquet(attach_labels(run.scores, pd.read_parquet(inputs.splits[i], columns=["id", "label"])),
                      output.scores[j])
        write_parquet(run.views, output.views[j])
        write_parquet(run.objective, output.objective[j])
        write_json({"model": wc.model, "dataset": wc.dataset, "detector": detector, "seed": int(seed),
                    "variants": run.summaries}, output.summary[j])
        rows[f"{detector}/seed-{seed}"] = len(run.scores)
write_manifest({**params.manifest, "rows": rows}, output.manifest, outputs=output)
