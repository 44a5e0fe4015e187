# The LaRA stage (layer-wise representation analysis, mialab.lara), on models such as the `kind: rl`
# GRPO checkpoints (rule rl_contaminate, rules/models.smk). Config: the `lara:` section (absent = no LaRA
# stage); schemas/config.schema.yaml. Stage keys: mialab/lara/plan.py (LARA_PLAN: METHOD_PLANS, rules/common.smk); the
# LaRA protocol: mialab/lara/stages.py.
#
# - lara_perturbations (dataset): each seed's split questions, known non-members (neighbour pool,
#   clean reference set), BlankImportant and paraphrases, a table per seed; model-free unless a
#   backend is llm (then lara.llm's instruction model, a local folder or a hub id in the cache).
# - lara_features (model, dataset): mean-pooled hidden states of every distinct text of all seeds'
#   perturbation tables (safetensors shards + index.parquet; a rerun keeps the shards already written).
# - lara_baselines (model, dataset): ReCaLL and the LaRA code's output-level baselines (CDD, Self-Critique,
#   recall_lara_code, response PPL / Min-K% / Min-K%++, DIME) on the questions, a table per seed (each
#   distinct question answered once).
# - lara_scores (model, dataset): RSM / DC / RSI, the detection score and its ablations, LaRA +
#   Self-Critique per beta, a table per seed; joins the results table through SCORE_PROVIDERS.
#   One job per (model, dataset) loads the model once for every seed.
# - lara_report (dataset): the comparison table with the config's paper targets beside the run's figures
#   (paper_targets, the evaluation's rows), and the layer-wise figure; `snakemake lara` builds them and everything
#   they need.
LARA_PLAN = METHOD_PLANS["lara"]  # mialab.lara.method
LARA = config.get("lara")


rule lara_perturbations:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        stand_ins=lambda wc: stand_ins_of(LARA.get("llm", {})),  # a rehearsal's instruction model
    output:
        tables=PLAN.seed_patterns("lara/perturbations", "perturbations.parquet"),
        manifest=PLAN.pattern("lara/perturbations", "manifest.json"),
    params:
        spec=lambda wc: LARA_PLAN.perturbation_config(),
        seeds=SEEDS,
        manifest=lambda wc: _checked(LARA_PLAN.perturbation_run(wc.dataset), wc).manifest,
    threads: 1
    resources:
        **sized("lara_perturbations"),
    log:
        PLAN.stage_log("lara_perturbations", "lara/perturbations"),
    benchmark:
        PLAN.stage_benchmark("lara_perturbations", "lara/perturbations")
    script:
        "../workflow_scripts/lara_perturbations.py"


rule lara_features:
    input:
        tables=lambda wc: [LARA_PLAN.perturbations(wc.dataset, s).path("perturbations.parquet") for s in SEEDS],
        model=lambda wc: model_dir(wc.model),
    output:
        index=PLAN.pattern("lara/features", "index.parquet"),
        manifest=PLAN.pattern("lara/features", "manifest.json"),
    params:
        spec=lambda wc: LARA["features"],
        model_path=lambda wc: PLAN.model_path(wc.model),
        manifest=lambda wc: _checked(LARA_PLAN.model_run("features", wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    resources:
        **sized("lara_features"),
    log:
        PLAN.stage_log("lara_features", "lara/features"),
    benchmark:
        PLAN.stage_benchmark("lara_features", "lara/features")
    script:
        "../workflow_scripts/lara_features.py"


rule lara_baselines:
    input:
        tables=lambda wc: [LARA_PLAN.perturbations(wc.dataset, s).path("perturbations.parquet") for s in SEEDS],
        model=lambda wc: model_dir(wc.model),
    output:
        scores=PLAN.seed_patterns("lara/baselines", "baselines.parquet"),
        manifest=PLAN.pattern("lara/baselines", "manifest.json"),
    params:
        spec=lambda wc: LARA["baselines"],
        model_path=lambda wc: PLAN.model_path(wc.model),
        manifest=lambda wc: _checked(LARA_PLAN.model_run("baselines", wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    resources:
        **sized("lara_baselines"),
    log:
        PLAN.stage_log("lara_baselines", "lara/baselines"),
    benchmark:
        PLAN.stage_benchmark("lara_baselines", "lara/baselines")
    script:
        "../workflow_scripts/lara_baselines.py"


rule lara_scores:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        tables=lambda wc: [LARA_PLAN.perturbations(wc.dataset, s).path("perturbations.parquet") for s in SEEDS],
        index=lambda wc: LARA_PLAN.model_run("features", wc.model, wc.dataset).path("index.parquet"),
        baselines=lambda wc: [seed_part(LARA_PLAN.model_run("baselines", wc.model, wc.dataset), s).path(
            "baselines.parquet") for s in SEEDS],
    output:
        scores=PLAN.seed_patterns("lara/scores", "scores.parquet"),
        metrics=PLAN.seed_patterns("lara/scores", "metrics.parquet"),
        manifest=PLAN.pattern("lara/scores", "manifest.json"),
    params:
        detection=lambda wc: LARA["detection"],
        betas=lambda wc: LARA["betas"],
        manifest=lambda wc: _checked(LARA_PLAN.score_run(wc.model, wc.dataset), wc).manifest,
    log:
        PLAN.stage_log("lara_scores", "lara/scores"),
    script:
        "../workflow_scripts/lara_scores.py"


rule lara_report:
    input:
        per_seed=evaluation_outputs("{dataset}")["per_seed"],
        reproduction=evaluation_outputs("{dataset}")["reproduction"],  # the paper targets' rows
        metrics=lambda wc: [LARA_PLAN.scores(m, wc.dataset, s).path("metrics.parquet")
                            for m, s in LARA_PLAN.runs(wc.dataset, SEEDS)],
        splits=lambda wc: [split_file(wc.dataset, s) for _, s in LARA_PLAN.runs(wc.dataset, SEEDS)],
    output:
        markdown=LARA_PLAN.report_outputs("{dataset}")["lara.md"],
        table=report(LARA_PLAN.report_outputs("{dataset}")["lara.csv"], category="LaRA", subcategory="{dataset}"),
        layers=report(LARA_PLAN.report_outputs("{dataset}")["layers.png"], category="LaRA", subcategory="{dataset}"),
    params:
        runs=lambda wc: LARA_PLAN.runs(wc.dataset, SEEDS),
        models=lambda wc: LARA_PLAN.models(),
        fpr_targets=config["evaluation"]["fpr_targets"],
        bootstrap=config["evaluation"]["bootstrap"],
    log:
        PLAN.log("lara_report", "{dataset}"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/lara_report.py"


rule lara:
    input:
        [path for d in LARA_PLAN.datasets() for path in LARA_PLAN.report_outputs(d).values()],
