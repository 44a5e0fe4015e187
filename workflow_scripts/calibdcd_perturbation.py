"""Rule calibdcd_perturbation: VeilProbe's query of every pool text and its perturbation (the same for every target);
the original perturbation resumes from the parts of a killed attempt (``<perturbed>.parts/``, removed at the end)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import time

import pandas as pd

from mialab.calibdcd.stages import perturb_pool, scope_texts
from mialab.core.io import remove_stale_temporaries, write_manifest, write_parquet
from mialab.lm.engine import Parts, parts_folder

params, inputs, output = snakemake.params, snakemake.input, snakemake.output  # noqa: F821
start = time.perf_counter()
remove_stale_temporaries(*output)
texts = scope_texts(pd.read_parquet(inputs.pool, columns=["id", "text", "prefix", "suffix"]))
parts = Parts(parts_folder(output.perturbed))
perturbed = perturb_pool(texts, params.options, params.lm, parts=parts)
write_parquet(perturbed, output.perturbed)
parts.remove()
write_manifest({**params.manifest, "texts": len(texts), "changed": int((perturbed["perturbed_query"] != perturbed["query"]).sum()),
                "seconds": round(time.perf_counter() - start, 1)}, output.manifest, outputs=output)
