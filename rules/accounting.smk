# Job accounting: GPU-/CPU-hours of every SLURM job this workflow submitted, per job, stage
# (rule) and dataset, from sacct and the SLURM plugin's job logs (mialab.accounting).
#
# Config (all optional):
#   accounting:
#     since: now-30days        # sacct -S: the oldest submissions counted
#     after: [<final targets>] # run the accounting once these exist (e.g. the inputs of `all`)
# Run it after a workflow run with
#   snakemake --profile profiles/slurm --forcerun accounting -- accounting
# or list its outputs in `all` together with `accounting.after` to refresh it at the end of each run.


import sys
from pathlib import Path


rule accounting:
    input:
        config.get("accounting", {}).get("after", []),
    output:
        jobs="results/accounting/jobs.parquet",
        stages="results/accounting/stages.parquet",
        datasets="results/accounting/datasets.parquet",
        markdown="results/accounting/jobs.md",
    conda:
        "../environment.yml"
    log:
        "results/logs/accounting.log",
    params:
        python=sys.executable,
        cli=Path(workflow.current_basedir).parent / "workflow_scripts" / "accounting.py",
        since=config.get("accounting", {}).get("since", "now-30days"),
    localrule: True
    shell:
        "{params.python} {params.cli} report --out-dir $(dirname {output.jobs}) --since {params.since:q}"
        " --workdir . --log-dir .snakemake/slurm_logs > {log} 2>&1"
