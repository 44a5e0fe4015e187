# Per-dataset metrics and ROC plots, then one results table for all datasets.


rule evaluate_dataset:
    input:
        scores=lambda wc: [path for _, _, path in evaluation_runs(wc.dataset)],
    output:
        per_seed="results/evaluation/{dataset}/per_seed.parquet",
        summary="results/evaluation/{dataset}/summary.parquet",
        roc=report(
            "results/evaluation/{dataset}/roc.png",
            category="ROC curves",
            subcategory="{dataset}",
            caption="../report/roc.rst",
        ),
    params:
        runs=lambda wc: [(m, s) for m, s, _ in evaluation_runs(wc.dataset)],
        fpr_targets=config["evaluation"]["fpr_targets"],
    conda:
        "../environment.yml"
    log:
        "results/logs/evaluate_dataset/{dataset}.log",
    script:
        "../workflow_scripts/evaluate_dataset.py"


rule summarize:
    input:
        summaries=[f"results/evaluation/{d}/summary.parquet" for d in DATASETS],
        per_seed=[f"results/evaluation/{d}/per_seed.parquet" for d in DATASETS],
        leakage=lambda wc: LEAKAGE_TABLES,  # rules/leakage.smk: the split checks beside the results
    output:
        summary="results/evaluation/summary.parquet",
        per_seed="results/evaluation/per_seed.parquet",
        markdown="results/evaluation/summary.md",
        csv=report(
            "results/evaluation/summary.csv",
            category="Results table",
            caption="../report/summary.rst",
        ),
    params:
        fpr_targets=config["evaluation"]["fpr_targets"],
    conda:
        "../environment.yml"
    log:
        "results/logs/summarize.log",
    script:
        "../workflow_scripts/summarize.py"
