# The models a config trains: the tokenizer, pretrained bases and controls, SFT-contaminated checkpoints and
# RL-contaminated ones (GRPO checkpoints as models of kind `rl`, mialab.training; stage keys: mialab/training/plan.py,
# RL_PLAN in rules/common.smk), and masked LMs (kind `mlm`: VeilProbe's fill-mask model where no hub is reachable).
#
# - pretrain_mlm (model): a cased WordPiece tokenizer and a small BERT masked LM trained from scratch on the
#   entry's corpora (every text alike), resumable as pretrain_model (mialab.training.mlm).
# - rl_contaminate (run key, epoch): one epoch of a GRPO run on the member pool's members (or, with
#   members.split_seed, that split's members only) plus fillers. Epoch 1 starts from the run's `init`
#   model, epoch e resumes the trainer checkpoint of epoch e - 1 and keeps the full run's schedule,
#   so every epoch's weights equal those of one uninterrupted run. Its model/ is the `kind: rl`
#   model whose entry names that epoch. Periodic checkpoints go to work/, which a failed job leaves
#   behind: the retry resumes from the last one.


rule train_tokenizer:
    input:
        corpora=lambda wc: local_files(config["tokenizer"]["corpora"]),
    output:
        tokenizer=directory(PLAN.pattern("tokenizers", "tokenizer")),
        manifest=PLAN.pattern("tokenizers", "manifest.json"),
    params:
        spec=lambda wc: config["tokenizer"],
        manifest=lambda wc: _checked(PLAN.tokenizer(), wc).manifest,
    priority: 10  # every model needs it: the start of the critical path
    log:
        PLAN.stage_log("train_tokenizer", "tokenizers"),
    benchmark:
        PLAN.stage_benchmark("train_tokenizer", "tokenizers")
    script:
        "../workflow_scripts/train_tokenizer.py"


rule pretrain_model:
    input:
        tokenizer=lambda wc: PLAN.tokenizer().path("tokenizer"),
        filler=lambda wc: config["models"][wc.model]["filler"],
        member_pools=lambda wc: [member_pool_file(m["dataset"]) for m in config["models"][wc.model]["members"]],
    output:
        model=directory(PLAN.pattern("models", "model")),
        manifest=PLAN.pattern("models", "manifest.json"),
    wildcard_constraints:
        model=models_of("pretrain"),
    params:
        spec=lambda wc: config["models"][wc.model],
        manifest=lambda wc: _checked(PLAN.model(wc.model), wc).manifest,
    priority: 10  # training is the critical path: schedule it before the cheap jobs
    threads: 1
    log:
        PLAN.stage_log("pretrain_model", "models"),
    benchmark:
        PLAN.stage_benchmark("pretrain_model", "models")
    script:
        "../workflow_scripts/pretrain_model.py"


rule pretrain_mlm:
    input:
        corpora=lambda wc: local_files(config["models"][wc.model]["corpora"]),
    output:
        model=directory(PLAN.pattern("models", "model")),
        manifest=PLAN.pattern("models", "manifest.json"),
    wildcard_constraints:
        model=models_of("mlm"),
    params:
        spec=lambda wc: config["models"][wc.model],
        manifest=lambda wc: _checked(PLAN.model(wc.model), wc).manifest,
    threads: 1
    log:
        PLAN.stage_log("pretrain_mlm", "models"),
    benchmark:
        PLAN.stage_benchmark("pretrain_mlm", "models")
    script:
        "../workflow_scripts/pretrain_mlm.py"


rule sft_contaminate:
    input:
        init=lambda wc: model_dir(config["models"][wc.model]["init"]),
        member_pool=lambda wc: [member_pool_file(m["dataset"]) for m in [config["models"][wc.model].get("members")] if m],
        filler=lambda wc: local_files(config["models"][wc.model]["filler"]["source"]),
    output:
        model=directory(PLAN.pattern("models", "model")),
        manifest=PLAN.pattern("models", "manifest.json"),
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
        PLAN.stage_log("sft_contaminate", "models"),
    benchmark:
        PLAN.stage_benchmark("sft_contaminate", "models")
    shell:
        '"$MIALAB_PYTHON" -m mialab.core.launch --nproc {params.nproc:q} "$MIALAB_SCRIPTS/sft_contaminate.py"'
        " --init {params.init:q} {params.trust_init} --member-pool {input.member_pool:q} --spec {params.spec:q}"
        " --manifest {params.manifest:q} --out {output.model:q} --threads {threads} > {log:q} 2>&1"


rule rl_contaminate:
    input:
        init=lambda wc: model_dir(RL_PLAN.spec(wc.key)["init"]),
        member_pool=lambda wc: member_pool_file(RL_PLAN.spec(wc.key)["members"]["dataset"]),
        member_split=lambda wc: RL_PLAN.member_split(wc.key),
        filler=lambda wc: local_files(RL_PLAN.spec(wc.key)["filler"]["source"]),
        previous=lambda wc: RL_PLAN.previous(wc.key, int(wc.epoch)),
    output:
        model=directory(PLAN.pattern("rl", EPOCH_PART, "model")),
        trainer=directory(PLAN.pattern("rl", EPOCH_PART, "trainer")),
        corpus=PLAN.pattern("rl", EPOCH_PART, "corpus.parquet"),
        log=PLAN.pattern("rl", EPOCH_PART, "log.parquet"),
        manifest=PLAN.pattern("rl", EPOCH_PART, "manifest.json"),
    params:
        init=lambda wc: PLAN.model_path(RL_PLAN.spec(wc.key)["init"]),
        trust_init=lambda wc: trust_flag(RL_PLAN.spec(wc.key)["init"]),
        spec=lambda wc: json.dumps(RL_PLAN.spec(wc.key)),
        manifest=lambda wc: json.dumps(RL_PLAN.manifest(wc.key, int(wc.epoch))),
        previous=lambda wc, input: shlex.join(["--previous", *input.previous]) if input.previous else "",
        member_split=lambda wc, input: (
            shlex.join(["--member-split", *input.member_split]) if input.member_split else ""
        ),
        work=PLAN.pattern("rl", EPOCH_PART, "work"),
        nproc=config["launch"]["nproc"],
    priority: 10  # training is the critical path: schedule it before the cheap jobs
    threads: 2
    resources:
        **sized("rl_contaminate", model=lambda wc: RL_PLAN.spec(wc.key)["init"], spec=lambda wc: RL_PLAN.spec(wc.key)),
    log:
        PLAN.stage_log("rl_contaminate", "rl", EPOCH_PART),
    benchmark:
        PLAN.stage_benchmark("rl_contaminate", "rl", EPOCH_PART)
    shell:
        '"$MIALAB_PYTHON" -m mialab.core.launch --nproc {params.nproc:q} "$MIALAB_SCRIPTS/rl_contaminate.py"'
        " --init {params.init:q} {params.trust_init} --member-pool {input.member_pool:q} {params.member_split}"
        " --spec {params.spec:q}"
        " --manifest {params.manifest:q} --epoch {wildcards.epoch:q} {params.previous} --work {params.work:q}"
        " --out-model {output.model:q} --out-trainer {output.trainer:q} --out-corpus {output.corpus:q}"
        " --out-log {output.log:q} --out-manifest {output.manifest:q} --threads {threads} > {log:q} 2>&1"
