# The paraphrased setting (ADRA appendix B; mialab.data.paraphrase). A dataset entry asks for it with
# `paraphrase: {backend: offline|hf|vllm, apply_to: evaluation|training, options: {...}}`:
#
# - apply_to: evaluation (existing models): rule paraphrase rewrites each seed's split (prefix,
#   suffix and text; ids, labels and order kept) into results/paraphrases/<dataset>/seed-<s>/<key>/,
#   and split_file() (rules/common.smk) hands that split to every stage that reads the split.
# - apply_to: training (fine-tuning experiments): paraphrase_pool rewrites the pool's members into
#   results/paraphrases/<dataset>/pool/<key>/pool.parquet (PLAN.member_pool(dataset), read by the
#   training rules through member_pool_file()) for models to train on, evaluated on the original split.
#
# Either way the split's manifest records the setting (mialab.pipeline.plan.Plan.split), and the
# paraphrase stage's manifest records the backend, its options and how many rows changed. In a rehearsal
# the paraphraser's stand-in folder (options.model) is an input of both rules.


rule paraphrase:
    input:
        split=lambda wc: PLAN.split(wc.dataset, int(wc.seed)).path("split.parquet"),
        stand_ins=lambda wc: stand_ins_of(PLAN.paraphrase_spec(wc.dataset)),  # a rehearsal's paraphraser
    output:
        split=PLAN.pattern("paraphrases", "split.parquet", of=SEED_PART),
        manifest=PLAN.pattern("paraphrases", "manifest.json", of=SEED_PART),
    params:
        spec=lambda wc: PLAN.paraphrase_spec(wc.dataset),
        family=lambda wc: config["datasets"][wc.dataset]["pool"]["family"],
        manifest=lambda wc: _checked(PLAN.paraphrased_split(wc.dataset, int(wc.seed)), wc).manifest,
    threads: 1
    resources:
        **sized("paraphrase"),
    log:
        PLAN.stage_log("paraphrase", "paraphrases", of=SEED_PART),
    benchmark:
        PLAN.stage_benchmark("paraphrase", "paraphrases", of=SEED_PART)
    script:
        "../workflow_scripts/paraphrase.py"


rule paraphrase_pool:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        stand_ins=lambda wc: stand_ins_of(PLAN.paraphrase_spec(wc.dataset)),  # a rehearsal's paraphraser
    output:
        pool=PLAN.pattern("paraphrases", "pool.parquet", of="pool"),
        manifest=PLAN.pattern("paraphrases", "manifest.json", of="pool"),
    params:
        spec=lambda wc: PLAN.paraphrase_spec(wc.dataset),
        family=lambda wc: config["datasets"][wc.dataset]["pool"]["family"],
        manifest=lambda wc: _checked(PLAN.paraphrased_pool(wc.dataset), wc).manifest,
    threads: 1
    resources:
        **sized("paraphrase_pool"),
    log:
        PLAN.stage_log("paraphrase_pool", "paraphrases", of="pool"),
    benchmark:
        PLAN.stage_benchmark("paraphrase_pool", "paraphrases", of="pool")
    script:
        "../workflow_scripts/paraphrase.py"
