"""Rule calibdcd_perturbation: VeilProbe's query of every pool text and its perturbation (the same for every target);
the original perturbation resumes from the parts of a killed attempt (``<perturbed>.parts/``, removed at the end)."""

from mialab.core.jobs import Job, setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.calibdcd.stages import perturb_pool, scope_texts
from mialab.core.io import write_parquet
from mialab.lm.engine import parts_folder

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
job = Job(output, scratch=[parts_folder(output.perturbed)])
texts = scope_texts(pd.read_parquet(inputs.pool, columns=["id", "text", "prefix", "suffix"]))
perturbed = perturb_pool(texts, params.options, params.lm, parts=parts_folder(output.perturbed))
write_parquet(perturbed, output.perturbed)
job.finish({**params.manifest, "texts": len(texts),
            "changed": int((perturbed["perturbed_query"] != perturbed["query"]).sum())}, output.manifest)
