# Job accounting: GPU-/CPU-hours, efficiencies and queue waits of every SLURM job this workflow
# submitted, per job, stage (rule), dataset and model, and a figure of GPU-hours per stage, from sacct
# and the SLURM plugin's job logs (mialab.pipeline.accounting).
#
# Config (all optional):
#   accounting:
#     since: now-30days        # sacct -S: the oldest submissions counted
#     after: [<final targets>] # run the accounting once these exist (e.g. the inputs of `all`)
# Every run through the SLURM executor writes it at its end, failed runs too (the onsuccess and onerror
# hooks below, mialab.pipeline.accounting.report_after_run); to refresh it by hand:
#   snakemake --profile profiles/slurm --forcerun accounting -- accounting

from mialab.pipeline.accounting import report_after_run


rule accounting:
    input:
        config.get("accounting", {}).get("after", []),
    output:
        jobs=PLAN.output("accounting", "jobs.parquet"),
        stages=PLAN.output("accounting", "stages.parquet"),
        datasets=PLAN.output("accounting", "datasets.parquet"),
        models=PLAN.output("accounting", "models.parquet"),
        markdown=PLAN.output("accounting", "jobs.md"),
        figure=PLAN.output("accounting", "gpu_hours.png"),
    log:
        PLAN.log("accounting"),
    params:
        out_dir=lambda wc, output: os.path.dirname(output.jobs),
        since=config.get("accounting", {}).get("since", "now-30days"),
    localrule: True
    shell:
        '"$MIALAB_PYTHON" "$MIALAB_SCRIPTS/accounting.py" report --out-dir {params.out_dir:q} --since {params.since:q}'
        " --workdir . --log-dir .snakemake/slurm_logs > {log:q} 2>&1"


onsuccess:
    if workflow.executor_plugin is not None and workflow.executor_plugin.cli_prefix == "slurm":
        report_after_run("succeeded", config.get("accounting", {}).get("since", "now-30days"))


onerror:
    # the GPU-hours of a failed run are spent too: account them (and where they went) as well
    if workflow.executor_plugin is not None and workflow.executor_plugin.cli_prefix == "slurm":
        report_after_run("failed", config.get("accounting", {}).get("since", "now-30days"))
