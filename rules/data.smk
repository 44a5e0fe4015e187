# Raw corpora -> candidate pools -> per-seed member/non-member splits (parquet, schema in mialab/data/schema.py).


rule build_pool:
    input:
        sources=lambda wc: local_files(config["datasets"][wc.dataset]["pool"]["source"]),
        stand_ins=lambda wc: stand_ins_of(config["datasets"][wc.dataset]["pool"]),  # a rehearsal's tokenizer
    output:
        pool=PLAN.pattern("pools", "pool.parquet"),
        manifest=PLAN.pattern("pools", "manifest.json"),
    params:
        spec=lambda wc: config["datasets"][wc.dataset]["pool"],
        manifest=lambda wc: _checked(PLAN.pool(wc.dataset), wc).manifest,
    priority: 10  # pretraining mixes pool members in: start it on the critical path, not after cheap jobs
    log:
        PLAN.stage_log("build_pool", "pools"),
    script:
        "../workflow_scripts/build_pool.py"


rule build_split:
    input:
        pool=lambda wc: pool_file(wc.dataset),
    output:
        split=PLAN.pattern("splits", "split.parquet"),
        manifest=PLAN.pattern("splits", "manifest.json"),
    params:
        spec=lambda wc: config["datasets"][wc.dataset]["split"],
        manifest=lambda wc: _checked(PLAN.split(wc.dataset, int(wc.seed)), wc).manifest,
    log:
        PLAN.stage_log("build_split", "splits"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/build_split.py"
