# The tiny world's models: tokenizer, pretrained base and control, SFT-contaminated checkpoint.


rule train_tokenizer:
    input:
        corpora=lambda wc: local_files(config["tokenizer"]["corpora"]),
    output:
        tokenizer=directory("results/tokenizers/{key}/tokenizer"),
        manifest="results/tokenizers/{key}/manifest.json",
    params:
        spec=lambda wc: config["tokenizer"],
        manifest=lambda wc: _checked(PLAN.tokenizer(), wc).manifest,
    priority: 10  # every model needs it: the start of the critical path
    log:
        "results/logs/train_tokenizer/{key}.log",
    benchmark:
        "results/benchmarks/train_tokenizer/{key}.tsv"
    script:
        "../workflow_scripts/train_tokenizer.py"


rule pretrain_model:
    input:
        tokenizer=lambda wc: PLAN.tokenizer().path("tokenizer"),
        filler=lambda wc: config["models"][wc.model]["filler"],
        member_pools=lambda wc: [member_pool_file(m["dataset"]) for m in config["models"][wc.model]["members"]],
    output:
        model=directory("results/models/{model}/{key}/model"),
        manifest="results/models/{model}/{key}/manifest.json",
    wildcard_constraints:
        model=models_of("pretrain"),
    params:
        spec=lambda wc: config["models"][wc.model],
        manifest=lambda wc: _checked(PLAN.model(wc.model), wc).manifest,
    priority: 10  # training is the critical path: schedule it before the cheap jobs
    threads: 1
    log:
        "results/logs/pretrain_model/{model}/{key}.log",
    benchmark:
        "results/benchmarks/pretrain_model/{model}/{key}.tsv"
    script:
        "../workflow_scripts/pretrain_model.py"


rule sft_contaminate:
    input:
        init=lambda wc: model_dir(config["models"][wc.model]["init"]),
        member_pool=lambda wc: [member_pool_file(m["dataset"]) for m in [config["models"][wc.model].get("members")] if m],
        filler=lambda wc: local_files(config["models"][wc.model]["filler"]["source"]),
    output:
        model=directory("results/models/{model}/{key}/model"),
        manifest="results/models/{model}/{key}/manifest.json",
    wildcard_constraints:
        model=models_of("sft"),
    params:
        init=lambda wc: PLAN.model_path(config["models"][wc.model]["init"]),
        trust_init=lambda wc: trust_flag(config["models"][wc.model]["init"]),
        spec=lambda wc: json.dumps(config["models"][wc.model]),
        manifest=lambda wc: json.dumps(_checked(PLAN.model(wc.model), wc).manifest),
        nproc=config["launch"]["nproc"],
    priority: 10  # training is the critical path: schedule it before the cheap jobs
    threads: 2
    resources:
        **sized("sft_contaminate"),
    log:
        "results/logs/sft_contaminate/{model}/{key}.log",
    benchmark:
        "results/benchmarks/sft_contaminate/{model}/{key}.tsv"
    shell:
        '"$MIALAB_PYTHON" -m mialab.core.launch --nproc {params.nproc:q} "$MIALAB_SCRIPTS/sft_contaminate.py"'
        " --init {params.init:q} {params.trust_init} --member-pool {input.member_pool:q} --spec {params.spec:q}"
        " --manifest {params.manifest:q} --out {output.model:q} --threads {threads} > {log:q} 2>&1"
