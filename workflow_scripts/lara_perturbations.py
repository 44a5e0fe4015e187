"""Rule lara_perturbations: the split's questions, known non-members and their perturbations (model-free)."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import time

import pandas as pd

from mialab.io import write_json, write_parquet
from mialab.lara.stages import REFERENCE, perturbation_table, stage_questions

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
spec = params.spec
start = time.perf_counter()
split, pool = pd.read_parquet(inputs.split), pd.read_parquet(inputs.pool)
seed = [spec["controls"]["seed"], int(snakemake.wildcards.seed)]  # noqa: F821
questions, neighbour_pool = stage_questions(split, pool, rule=spec["question"]["rule"],
                                            max_words=spec["question"].get("max_words"),
                                            n_reference=spec["controls"]["n_reference"], seed=seed,
                                            blank=spec["blank"])
paraphrase = {k: v for k, v in spec["paraphrase"].items() if k != "n_variants"}
table = perturbation_table(questions, neighbour_pool, n_neighbours=spec["neighbours"]["n"],
                           n_variants=spec["paraphrase"]["n_variants"], blank=spec["blank"], paraphrase=paraphrase,
                           neighbour_options={"batch_size": spec["neighbours"]["batch_size"]})
write_parquet(table, output.table)
write_json({**params.manifest, "questions": int((questions["set"] != REFERENCE).sum()),
            "reference_questions": int((questions["set"] == REFERENCE).sum()), "neighbour_pool": len(neighbour_pool),
            "rows": len(table), "distinct_texts": int(table["text"].nunique()),
            "seconds": round(time.perf_counter() - start, 1)}, output.manifest)
