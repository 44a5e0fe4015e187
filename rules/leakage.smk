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
#
# LEAKAGE_TABLES, LEAKAGE_SUMMARY and the per-dataset target's tables: rules/common.smk.


rule leakage_check:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
    output:
        tables=PLAN.seed_patterns("leakage", "leakage.parquet"),
        details=PLAN.seed_patterns("leakage", "leakage.json"),
        manifest=PLAN.pattern("leakage", "manifest.json"),
    params:
        options=lambda wc: PLAN.leakage_options(wc.dataset),
        seeds=SEEDS,
        manifest=lambda wc: _checked(PLAN.leakage_run(wc.dataset), wc).manifest,
    threads: 1
    log:
        PLAN.stage_log("leakage_check", "leakage"),
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
        PLAN.log("leakage_summary"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/leakage_summary.py"
