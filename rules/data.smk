# Raw corpora -> candidate pools -> per-seed member/non-member splits (parquet, schema in mialab/data/schema.py).


rule build_pool:
    input:
        sources=lambda wc: local_files(config["datasets"][wc.dataset]["pool"]["source"]),
        stand_ins=lambda wc: stand_ins_of(config["datasets"][wc.dataset]["pool"]),  # a rehearsal's tokenizer
    output:
        pool="results/pools/{dataset}/{key}/pool.parquet",
        manifest="results/pools/{dataset}/{key}/manifest.json",
    params:
        spec=lambda wc: config["datasets"][wc.dataset]["pool"],
        manifest=lambda wc: _checked(PLAN.pool(wc.dataset), wc).manifest,
    priority: 10  # pretraining mixes pool members in: start it on the critical path, not after cheap jobs
    log:
        "results/logs/build_pool/{dataset}/{key}.log",
    script:
        "../workflow_scripts/build_pool.py"


rule build_split:
    input:
        pool=lambda wc: pool_file(wc.dataset),
    output:
        split="results/splits/{dataset}/seed-{seed}/{key}/split.parquet",
        manifest="results/splits/{dataset}/seed-{seed}/{key}/manifest.json",
    params:
        spec=lambda wc: config["datasets"][wc.dataset]["split"],
        manifest=lambda wc: _checked(PLAN.split(wc.dataset, int(wc.seed)), wc).manifest,
    log:
        "results/logs/build_split/{dataset}/seed-{seed}/{key}.log",
    script:
        "../workflow_scripts/build_split.py"
