# Passive baselines (Loss, R-Loss, Zlib, Min-K%, Min-K%++) and the scoring attacks (mialab.scoring.attacks) on every (model, dataset, seed): one job
# per (model, dataset) scores every seed's split, each distinct text once (mialab.pipeline.plan.Plan.score_run).
# An attack's work that no target model changes (the neighbourhood attack's neighbours) is done once per dataset
# by prepare_attack (mialab.pipeline.plan.Plan.attack_run), and read by every score job of the dataset.


rule score_baselines:
    input:
        unpack(reference_scores),
        unpack(attack_files),
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        model=lambda wc: model_dir(wc.model),
    output:
        scores=PLAN.seed_patterns("scores", "scores.parquet"),
        manifest=PLAN.pattern("scores", "manifest.json"),
    params:
        spec=PLAN.scoring(),
        attack_inputs=lambda wc: attack_inputs(wc.dataset),
        model_path=lambda wc: PLAN.model_path(wc.model),
        manifest=lambda wc: _checked(PLAN.score_run(wc.model, wc.dataset), wc).manifest,
    threads: 1
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    resources:
        **sized("score_baselines"),
    log:
        PLAN.stage_log("score_baselines", "scores"),
    benchmark:
        PLAN.stage_benchmark("score_baselines", "scores")
    script:
        "../workflow_scripts/score_baselines.py"


rule prepare_attack:
    input:
        unpack(prepare_files),
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
    output:
        table=PLAN.pattern("attacks", "prepared.parquet"),
        manifest=PLAN.pattern("attacks", "manifest.json"),
    params:
        # exactly what the stage's key holds: the settings its work reads, and the device
        settings=lambda wc: prepared_run(wc.attack, wc.dataset).manifest["config"],
        device=lambda wc: prepared_run(wc.attack, wc.dataset).manifest["device"],
        inputs=lambda wc: prepare_inputs(wc.attack, wc.dataset),
        manifest=lambda wc: _checked(prepared_run(wc.attack, wc.dataset), wc).manifest,
    threads: 1
    priority: 5
    resources:
        **sized("prepare_attack", model=lambda wc: prepare_model(wc.attack)),
    log:
        PLAN.stage_log("prepare_attack", "attacks"),
    benchmark:
        PLAN.stage_benchmark("prepare_attack", "attacks")
    script:
        "../workflow_scripts/prepare_attack.py"
