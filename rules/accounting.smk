# Job accounting: GPU-/CPU-hours of every SLURM job this workflow submitted, per job, stage
# (rule) and dataset, from sacct and the SLURM plugin's job logs (mialab.accounting).
#
# Config (all optional):
#   accounting:
#     since: now-30days        # sacct -S: the oldest submissions counted
#     after: [<final targets>] # run the accounting once these exist (e.g. the inputs of `all`)
# Every successful run through the SLURM executor writes it at its end (the onsuccess hook below);
# to refresh it by hand:
#   snakemake --profile profiles/slurm --forcerun accounting -- accounting


import os
import subprocess
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
        out_dir=lambda wc, output: os.path.dirname(output.jobs),
        since=config.get("accounting", {}).get("since", "now-30days"),
    localrule: True
    shell:
        '"$MIALAB_PYTHON" "$MIALAB_SCRIPTS/accounting.py" report --out-dir {params.out_dir:q} --since {params.since:q}'
        " --workdir . --log-dir .snakemake/slurm_logs > {log:q} 2>&1"


onsuccess:
    # After every successful SLURM run: GPU-/CPU-hours of this workflow's jobs in results/accounting/.
    # A failure here is reported, not raised: the run's own results are complete.
    if workflow.executor_plugin is not None and workflow.executor_plugin.cli_prefix == "slurm":
        since = config.get("accounting", {}).get("since", "now-30days")
        Path("results/logs").mkdir(parents=True, exist_ok=True)
        try:  # an argument list: no shell, so no value of the config reaches one
            with open("results/logs/accounting.log", "w") as log:
                subprocess.run([sys.executable, entry_point("accounting.py"), "report", "--out-dir",
                                "results/accounting", "--since", since, "--workdir", ".",
                                "--log-dir", ".snakemake/slurm_logs"],
                               stdout=log, stderr=subprocess.STDOUT, check=True)
        except Exception as err:
            print(f"job accounting failed ({err}); see results/logs/accounting.log", file=sys.stderr)
