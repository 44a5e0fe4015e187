# Leakage and distribution-shift checks of every split (mialab.data.leakage), before any model sees it.
#
# - leakage_check (dataset, seed): cross-class exact / word n-gram / embedding (faiss over
#   all-MiniLM-L6-v2) duplicate pairs, the blind baseline (bag-of-n-grams classifier, CV AUROC,
#   no model) and length statistics of the split the attacks read (the paraphrased one in that
#   setting): results/leakage/<dataset>/seed-<s>/<key>/{leakage.parquet,leakage.json,manifest.json}.
#   Cross-class duplicates fail the job, naming the dataset, seed and ids, unless
#   `leakage.allow_duplicates` allows them (true, or a list of datasets).
# - leakage_summary: every split in results/leakage/summary.{md,csv}, with a warning line per split
#   whose blind-baseline AUROC exceeds `leakage.blind_warn`. The results summary
#   (rule summarize) shows the per-dataset figures beside the attack AUROCs.

# the per-split tables of every (dataset, seed), in that order (rule summarize reads them too)
LEAKAGE_TABLES = [PLAN.leakage(d, s).path("leakage.parquet") for d in DATASETS for s in SEEDS]
LEAKAGE_SUMMARY = {"markdown": "results/leakage/summary.md", "csv": "results/leakage/summary.csv"}
EXTRA_TARGETS.extend(LEAKAGE_SUMMARY.values())
DATASET_OUTPUTS.append(lambda ds: [PLAN.leakage(ds, s).path("leakage.parquet") for s in SEEDS])


rule leakage_check:
    input:
        split=lambda wc: split_file(wc.dataset, int(wc.seed)),
    output:
        table="results/leakage/{dataset}/seed-{seed}/{key}/leakage.parquet",
        details="results/leakage/{dataset}/seed-{seed}/{key}/leakage.json",
        manifest="results/leakage/{dataset}/seed-{seed}/{key}/manifest.json",
    params:
        options=lambda wc: PLAN.leakage_options(wc.dataset),
        manifest=lambda wc: _checked(PLAN.leakage(wc.dataset, int(wc.seed)), wc).manifest,
    threads: 1
    conda:
        "../environment.yml"
    log:
        "results/logs/leakage_check/{dataset}/seed-{seed}/{key}.log",
    script:
        "../workflow_scripts/leakage_check.py"


rule leakage_summary:
    input:
        tables=LEAKAGE_TABLES,
    output:
        markdown=report(
            LEAKAGE_SUMMARY["markdown"], category="Leakage", caption="../report/leakage.rst"
        ),
        csv=report(LEAKAGE_SUMMARY["csv"], category="Leakage", caption="../report/leakage.rst"),
    conda:
        "../environment.yml"
    log:
        "results/logs/leakage_summary.log",
    script:
        "../workflow_scripts/leakage_summary.py"
