# Per-dataset metrics, headline rows (bootstrap CIs, paired tests), the paper targets' rows and low-FPR ROC plots,
# then one results table for all datasets: the headline first, the paper's figures beside the run's (Reproduction),
# every method and ablation as the appendix.


rule evaluate_dataset:
    input:
        scores=lambda wc: [path for _, _, path in evaluation_runs(wc.dataset)],
    output:
        per_seed=evaluation_outputs("{dataset}")["per_seed"],
        summary=evaluation_outputs("{dataset}")["summary"],
        headline=evaluation_outputs("{dataset}")["headline"],
        reproduction=evaluation_outputs("{dataset}")["reproduction"],
        roc=report(
            evaluation_outputs("{dataset}")["roc"],
            category="ROC curves",
            subcategory="{dataset}",
            caption="../report/roc.rst",
        ),
    params:
        runs=lambda wc: [(m, s) for m, s, _ in evaluation_runs(wc.dataset)],
        fpr_targets=config["evaluation"]["fpr_targets"],
        headline=config["evaluation"]["headline"],
        baseline=config["evaluation"]["baseline"],
        bootstrap=config["evaluation"]["bootstrap"],
        paper_targets=lambda wc: paper_targets(wc.dataset),
    log:
        PLAN.log("evaluate_dataset", "{dataset}"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/evaluate_dataset.py"


rule summarize:
    input:
        summaries=[evaluation_outputs(d)["summary"] for d in DATASETS],
        per_seed=[evaluation_outputs(d)["per_seed"] for d in DATASETS],
        headlines=[evaluation_outputs(d)["headline"] for d in DATASETS],
        reproductions=[evaluation_outputs(d)["reproduction"] for d in DATASETS],
        leakage=LEAKAGE_TABLES,  # rules/leakage.smk's checks of the splits, beside the results
        pools=[PLAN.pool(d).path("manifest.json") for d in DATASETS],  # the exact repeats each pool dropped
    output:
        summary=SUMMARY["summary"],
        per_seed=SUMMARY["per_seed"],
        markdown=SUMMARY["markdown"],
        csv=report(
            SUMMARY["csv"],
            category="Results table",
            subcategory="appendix: every method and ablation",
            caption="../report/summary.rst",
        ),
        headline=SUMMARY["headline"],
        headline_csv=report(
            SUMMARY["headline_csv"],
            category="Results table",
            subcategory="headline",
            caption="../report/headline.rst",
        ),
        reproduction_csv=report(
            SUMMARY["reproduction_csv"],
            category="Results table",
            subcategory="reproduction",
            caption="../report/reproduction.rst",
        ),
        forest=report(
            SUMMARY["forest"],
            category="Results table",
            subcategory="headline",
            caption="../report/forest.rst",
        ),
    params:
        fpr_targets=config["evaluation"]["fpr_targets"],
        headline=config["evaluation"]["headline"],
        bootstrap=config["evaluation"]["bootstrap"],
        truncation_warn=config["scoring"]["truncation_warn"],
        controls=no_member_models(config["models"]),
    log:
        PLAN.log("summarize"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/summarize.py"
