# Per-stage targets (snakemake splits / models / scores / evaluation / leakage) and one target per dataset
# (snakemake dataset_<name>) for partial runs.


rule splits:
    input:
        [split_file(d, s) for d in DATASETS for s in SEEDS],


rule models:
    input:
        model_dirs(MODELS),


rule scores:
    input:
        [scores_file(m, d, s) for m, d in PLAN.evaluated_pairs() for s in SEEDS],


rule evaluation:
    input:
        SUMMARY["markdown"],
        SUMMARY["csv"],


rule leakage:
    input:
        LEAKAGE_SUMMARY.values(),


for _ds in DATASETS:

    rule:
        name:
            f"dataset_{_ds}"
        input:
            dataset_outputs(_ds),
