# Leakage and distribution-shift checks of every split (mialab.checks.leakage), before any model sees it.
#
# - leakage_check (dataset): cross-class exact / word n-gram / embedding (faiss over
#   all-MiniLM-L6-v2) duplicate pairs, the blind baseline (bag-of-n-grams classifier, CV AUROC,
#   no model) and length statistics of each seed's split the attacks read (the paraphrased one in
#   that setting): results/leakage/<dataset>/<key>/seed-<s>/{leakage.parquet,leakage.json} and the
#   job's manifest.json; one job per dataset loads the encoder once.
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
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
    output:
        tables=expand("results/leakage/{{dataset}}/{{key}}/seed-{seed}/leakage.parquet", seed=SEEDS),
        details=expand("results/leakage/{{dataset}}/{{key}}/seed-{seed}/leakage.json", seed=SEEDS),
        manifest="results/leakage/{dataset}/{key}/manifest.json",
    params:
        options=lambda wc: PLAN.leakage_options(wc.dataset),
        seeds=SEEDS,
        manifest=lambda wc: _checked(PLAN.leakage_run(wc.dataset), wc).manifest,
    threads: 1
    log:
        "results/logs/leakage_check/{dataset}/{key}.log",
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
    log:
        "results/logs/leakage_summary.log",
    script:
        "../workflow_scripts/leakage_summary.py"
