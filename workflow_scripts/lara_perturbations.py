"""Rule lara_perturbations: each seed's split questions, known non-members and their perturbations
(model-free; one job per dataset, so the retrieval encoder loads once)."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_parquet
from mialab.lara.stages import (
    backend_specs,
    instruction_model,
    perturbation_counts,
    perturbation_table,
    stage_questions,
)

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
spec = params.spec
job = Job(output)
pool = pd.read_parquet(inputs.pool)
generate = instruction_model(spec)
counts = {}
for seed, split_path, table_path in zip(params.seeds, inputs.splits, output.tables, strict=True):
    questions, neighbour_pool = stage_questions(pd.read_parquet(split_path), pool, rule=spec["question"]["rule"],
                                                max_words=spec["question"].get("max_words"),
                                                template=spec["question"]["template"],
                                                n_reference=spec["controls"]["n_reference"],
                                                seed=[spec["controls"]["seed"], int(seed)], blank=spec["blank"])
    table = perturbation_table(questions, backend_specs(spec, neighbour_pool, generate),
                               n_neighbours=spec["neighbours"]["n"], n_variants=spec["paraphrase"]["n_variants"])
    write_parquet(table, table_path)
    counts[f"seed-{seed}"] = perturbation_counts(questions, neighbour_pool, table)
job.finish({**params.manifest, "seeds_tables": counts}, output.manifest)
