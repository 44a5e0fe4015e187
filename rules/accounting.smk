# Job accounting: GPU-/CPU-hours, efficiencies and queue waits of every SLURM job this experiment submitted, per
# job, run, stage (rule), dataset and model, and a figure of GPU-hours per stage, from sacct and the SLURM
# plugin's job logs (mialab.pipeline.accounting), into results/accounting/<experiment>/: the experiment is the
# config files' names (EXPERIMENT), whose job-name prefix profiles/slurm gives every job, so two configs run from
# one checkout are accounted apart.
#
# Config (schemas/config.schema.yaml, `accounting:`): since (sacct -S), after (files to wait for), wait (seconds
# for slurmdbd to record the last jobs), thresholds (efficiency warnings).
# Every run through the SLURM executor writes it at its end, failed runs too (the onsuccess and onerror
# hooks below, mialab.pipeline.accounting.report_after_run); to refresh it by hand:
#   snakemake --profile profiles/slurm --forcerun accounting -- accounting
import time

from mialab.pipeline.accounting import experiment_name, experiment_prefix, report_after_run

EXPERIMENT = experiment_name(workflow.configfiles)
RUN_START = time.time()  # the jobs this run submits: the plugin's logs written since (accounting.wait)


rule accounting:
    input:
        config["accounting"]["after"],
    output:
        jobs=PLAN.output("accounting", EXPERIMENT, "jobs.parquet"),
        runs=PLAN.output("accounting", EXPERIMENT, "runs.parquet"),
        stages=PLAN.output("accounting", EXPERIMENT, "stages.parquet"),
        datasets=PLAN.output("accounting", EXPERIMENT, "datasets.parquet"),
        models=PLAN.output("accounting", EXPERIMENT, "models.parquet"),
        markdown=PLAN.output("accounting", EXPERIMENT, "jobs.md"),
        figure=PLAN.output("accounting", EXPERIMENT, "gpu_hours.png"),
    log:
        PLAN.log("accounting", EXPERIMENT),
    params:
        out_dir=lambda wc, output: os.path.dirname(output.jobs),
        since=config["accounting"]["since"],
        prefix=experiment_prefix(EXPERIMENT),
        thresholds=",".join(f"{k}={v}" for k, v in config["accounting"]["thresholds"].items()),
    localrule: True
    shell:
        '"$MIALAB_PYTHON" "$MIALAB_SCRIPTS/accounting.py" report --out-dir {params.out_dir:q} --since {params.since:q}'
        " --workdir . --log-dir .snakemake/slurm_logs --prefix {params.prefix:q} --thresholds {params.thresholds:q}"
        " > {log:q} 2>&1"


onsuccess:
    if workflow.executor_plugin is not None and workflow.executor_plugin.cli_prefix == "slurm":
        report_after_run("succeeded", config["accounting"], EXPERIMENT, RUN_START)


onerror:
    # the GPU-hours of a failed run are spent too: account them (and where they went) as well
    if workflow.executor_plugin is not None and workflow.executor_plugin.cli_prefix == "slurm":
        report_after_run("failed", config["accounting"], EXPERIMENT, RUN_START)
