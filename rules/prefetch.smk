# Staging (mialab/pipeline/prefetch.py): `snakemake --profile profiles/slurm prefetch` downloads every hub model
# and dataset the config names into HF_HOME, on the node Snakemake runs on (a local rule: the login
# node, which reaches the hub); the compute jobs then read them offline. Not part of `all`: a run never
# goes online by itself. After emptying HF_HOME, `--forcerun prefetch` fetches again.
from dataclasses import asdict

from mialab.pipeline.prefetch import hub_items


rule prefetch:
    output:
        manifest=PLAN.output("prefetch", "manifest.json"),
    params:
        repositories=[asdict(item) for item in hub_items(config)],
    log:
        PLAN.log("prefetch"),
    localrule: True
    script:
        "../workflow_scripts/prefetch.py"
