"""Rule calibdcd_features: the target's outputs under a scope's views and the detectors' features; the
outputs' generation resumes from the parts of a killed attempt (``<generations>.parts/``, removed at the end)."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.calibdcd.stages import extract_features, scope_texts
from mialab.core.io import write_parquet
from mialab.lm.engine import parts_folder, rollout_generator
from mialab.lm.loading import trusts_remote_code

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
job = Job(output, scratch=[parts_folder(output.generations)])
pool = pd.read_parquet(inputs.pool, columns=["id", "text", "prefix", "suffix"])
# views: every seed's D-cal, each text once (in order of first appearance)
ids = list(dict.fromkeys(i for p in inputs.calibration for i in pd.read_parquet(p)["id"].astype(str))) \
    if inputs.get("calibration") else None
texts = scope_texts(pool, ids)
if inputs.get("perturbed"):  # VeilProbe's prompts: rule calibdcd_perturbation's, the same for every target
    texts = texts.merge(pd.read_parquet(inputs.perturbed), on="id", how="left", validate="one_to_one")
gen = params.generation
parts = parts_folder(output.generations)
generate = rollout_generator(params.model_path, backend=gen["backend"], backend_options=gen["backend_options"],
                             parts=parts,
                             trust_remote_code=trusts_remote_code(snakemake.config, snakemake.wildcards.model))  # noqa: F821
run = extract_features(texts, params.views, generate=generate, detectors=params.detectors, lm_options=params.lm)
features = [d for d in params.detectors if d != "veilprobe"]  # VeilProbe's come from rule calibdcd_veilprobe
for det, path in zip(features, output.features, strict=True):
    write_parquet(run.features[det], path)
write_parquet(run.generations, output.generations)
job.finish({**params.manifest, "texts": len(texts), "prompts": int(run.generations["prompt"].nunique())},
           output.manifest)
