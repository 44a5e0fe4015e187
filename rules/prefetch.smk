# Staging (mialab/pipeline/prefetch.py): `snakemake --profile profiles/slurm prefetch` downloads every hub model,
# hub dataset and file the config names into HF_HOME and MIALAB_DATA_CACHE, on the node Snakemake runs on (a
# local rule: the login node, which reaches the hub); the compute jobs then read them offline. A hub dataset or
# model without a revision is fetched at the hub's current commit, which the rule writes into the config's lock
# file (LOCK, mialab/pipeline/lock.py; commit it). Not part of `all`: a run never goes online by itself. After
# emptying HF_HOME, `--forcerun prefetch` fetches again.
from dataclasses import asdict

from mialab.pipeline.lock import file_sources
from mialab.pipeline.prefetch import hub_items


rule prefetch:
    output:
        manifest=PLAN.output("prefetch", "manifest.json"),
    params:
        repositories=[asdict(item) for item in hub_items(config, LOCK_MODELS)],
        files=file_sources(config),
        lock=str(LOCK) if LOCK else None,
        config=CONFIG_FILE,
    log:
        PLAN.log("prefetch"),
    localrule: True
    script:
        "../workflow_scripts/prefetch.py"
