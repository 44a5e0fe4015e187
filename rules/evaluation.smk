# Per-dataset metrics, headline rows (bootstrap CIs, paired tests) and low-FPR ROC plots, then one
# results table for all datasets: the headline first, every method and ablation as the appendix.


rule evaluate_dataset:
    input:
        scores=lambda wc: [path for _, _, path in evaluation_runs(wc.dataset)],
    output:
        per_seed="results/evaluation/{dataset}/per_seed.parquet",
        summary="results/evaluation/{dataset}/summary.parquet",
        headline="results/evaluation/{dataset}/headline.parquet",
        roc=report(
            "results/evaluation/{dataset}/roc.png",
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
    log:
        "results/logs/evaluate_dataset/{dataset}.log",
    script:
        "../workflow_scripts/evaluate_dataset.py"


rule summarize:
    input:
        summaries=[f"results/evaluation/{d}/summary.parquet" for d in DATASETS],
        per_seed=[f"results/evaluation/{d}/per_seed.parquet" for d in DATASETS],
        headlines=[f"results/evaluation/{d}/headline.parquet" for d in DATASETS],
        leakage=lambda wc: LEAKAGE_TABLES,  # rules/leakage.smk: the split checks beside the results
    output:
        summary="results/evaluation/summary.parquet",
        per_seed="results/evaluation/per_seed.parquet",
        markdown="results/evaluation/summary.md",
        csv=report(
            "results/evaluation/summary.csv",
            category="Results table",
            subcategory="appendix: every method and ablation",
            caption="../report/summary.rst",
        ),
        headline="results/evaluation/headline.parquet",
        headline_csv=report(
            "results/evaluation/headline.csv",
            category="Results table",
            subcategory="headline",
            caption="../report/headline.rst",
        ),
        forest=report(
            "results/evaluation/forest.png",
            category="Results table",
            subcategory="headline",
            caption="../report/forest.rst",
        ),
    params:
        fpr_targets=config["evaluation"]["fpr_targets"],
        headline=config["evaluation"]["headline"],
        bootstrap=config["evaluation"]["bootstrap"],
        truncation_warn=config["scoring"]["truncation_warn"],
    log:
        "results/logs/summarize.log",
    script:
        "../workflow_scripts/summarize.py"
