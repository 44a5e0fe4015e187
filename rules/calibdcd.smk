# CalibDCD (calibrated feature-based detectors, mialab/calibdcd): partition -> features -> calibration
# of every variant -> report. Config section `calibdcd:` (schemas/config.schema.yaml); absent = not run.
# Stage keys: mialab/calibdcd/plan.py (CALIBDCD_PLAN: METHOD_PLANS,
# rules/common.smk); the protocol: mialab/calibdcd/stages.py.
#
# - calibdcd_reference (dataset): DPDLLM's reference model, the base reference fine-tuned on every pool
#   text (labels are not read).
# - calibdcd_partition (dataset, seed): supervised split and known non-members D-cal from the pool
#   without the seed's common split; that split is the evaluation set.
# - calibdcd_perturbation (dataset): VeilProbe's key-token perturbation of every pool text, once per pool
#   (it reads no target and no label); resumes from its parts.
# - calibdcd_features (model, dataset, scope): the target's outputs and DPDLLM's features; scope
#   `original` = the original query on every pool text (shared by all seeds, VeilProbe's prompts
#   too), scope `views` = the ten controlled views on every seed's D-cal (each text once; DPDLLM
#   only). One engine start per job.
# - calibdcd_veilprobe (model, dataset): VeilProbe's two mapping models, trained on the original
#   scope's generations, and its features of both scopes.
# - calibdcd_calibrate (model, dataset): every variant of every detector on every seed; a (detector,
#   seed)'s score table (columns calibdcd/<detector>/original and calibdcd/<detector>/<variant>,
#   in <key>/<detector>/seed-<s>/) joins the results table through SCORE_PROVIDERS.
# - calibdcd_report: the paper's tables (main results, ablations, false-positive recovery), and the config's paper
#   targets beside the run's figures (paper_targets); `snakemake calibdcd` builds it and everything it needs, nothing
#   else.
from mialab.calibdcd.plan import ORIGINAL_SCOPE, VIEWS_SCOPE

CALIBDCD_PLAN = METHOD_PLANS["calibdcd"]  # mialab.calibdcd.method
CALIBDCD_PAIRS = CALIBDCD_PLAN.pairs()
CALIBDCD_DETECTORS = CALIBDCD_PLAN.detectors()
CALIBDCD_REPORT = CALIBDCD_PLAN.report_outputs()
CALIBDCD_RUNS = CALIBDCD_PLAN.runs(SEEDS)
CALIBDCD_BASELINES = CALIBDCD_PLAN.baselines()


rule calibdcd_partition:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        split=lambda wc: split_file(wc.dataset, int(wc.seed)),
    output:
        supervised=PLAN.pattern("calibdcd/partitions", "supervised.parquet"),
        calibration=PLAN.pattern("calibdcd/partitions", "calibration.parquet"),
        evaluation=PLAN.pattern("calibdcd/partitions", "evaluation.parquet"),
        manifest=PLAN.pattern("calibdcd/partitions", "manifest.json"),
    params:
        spec=lambda wc: CALIBDCD_PLAN.spec["partition"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.partition(wc.dataset, int(wc.seed)), wc).manifest,
    log:
        PLAN.stage_log("calibdcd_partition", "calibdcd/partitions"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/calibdcd_partition.py"


rule calibdcd_reference:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        base=lambda wc: model_dirs(CALIBDCD_PLAN.lm_models(("reference_model",))),
    output:
        model=directory(PLAN.pattern("calibdcd/references", "model")),
        manifest=PLAN.pattern("calibdcd/references", "manifest.json"),
    params:
        base=lambda wc: CALIBDCD_PLAN.lm_path(CALIBDCD_PLAN.spec["detectors"]["dpdllm"]["reference_model"]),
        length=lambda wc: CALIBDCD_PLAN.spec["detectors"]["dpdllm"]["length"],
        finetune=lambda wc: CALIBDCD_PLAN.spec["detectors"]["dpdllm"]["finetune"],
        device=lambda wc: CALIBDCD_PLAN.spec["lm"]["device"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.reference(wc.dataset), wc).manifest,
    threads: 1
    resources:
        **sized("calibdcd_reference"),
    log:
        PLAN.stage_log("calibdcd_reference", "calibdcd/references"),
    benchmark:
        PLAN.stage_benchmark("calibdcd_reference", "calibdcd/references")
    script:
        "../workflow_scripts/calibdcd_reference.py"


rule calibdcd_perturbation:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        lms=lambda wc: model_dirs(CALIBDCD_PLAN.lm_models(("key_token_model", "key_token_models", "mlm_model"))),
    output:
        perturbed=PLAN.pattern("calibdcd/perturbations", "perturbed.parquet"),
        manifest=PLAN.pattern("calibdcd/perturbations", "manifest.json"),
    params:
        options=lambda wc: CALIBDCD_PLAN.perturbation_settings(CALIBDCD_PLAN.lm_path),
        lm=lambda wc: CALIBDCD_PLAN.spec["lm"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.perturbation(wc.dataset), wc).manifest,
    priority: 5
    threads: 1
    resources:
        **sized("calibdcd_perturbation"),
    log:
        PLAN.stage_log("calibdcd_perturbation", "calibdcd/perturbations"),
    benchmark:
        PLAN.stage_benchmark("calibdcd_perturbation", "calibdcd/perturbations")
    script:
        "../workflow_scripts/calibdcd_perturbation.py"


rule calibdcd_features:
    input:
        unpack(
            lambda wc: {}
            if wc.scope == ORIGINAL_SCOPE
            else {"calibration": [CALIBDCD_PLAN.partition(wc.dataset, s).path("calibration.parquet") for s in SEEDS]}
        ),
        unpack(
            lambda wc: {"perturbed": CALIBDCD_PLAN.perturbation(wc.dataset).path("perturbed.parquet")}
            if wc.scope == ORIGINAL_SCOPE and "veilprobe" in CALIBDCD_DETECTORS
            else {}
        ),
        pool=lambda wc: pool_file(wc.dataset),
        model=lambda wc: model_dir(wc.model),
        reference=lambda wc: [CALIBDCD_PLAN.reference(wc.dataset).path("model")] if "dpdllm" in CALIBDCD_DETECTORS else [],
    output:
        features=[  # VeilProbe's: rule calibdcd_veilprobe
            PLAN.pattern("calibdcd/features", f"features-{det}.parquet")
            for det in CALIBDCD_DETECTORS
            if det != "veilprobe"
        ],
        generations=PLAN.pattern("calibdcd/features", "generations.parquet"),
        manifest=PLAN.pattern("calibdcd/features", "manifest.json"),
    params:
        model_path=lambda wc: PLAN.model_path(wc.model),
        views=lambda wc: CALIBDCD_PLAN.views(wc.model, wc.scope),
        detectors=lambda wc: CALIBDCD_PLAN.detector_specs(CALIBDCD_PLAN.lm_path, wc.dataset, wc.scope),
        generation=lambda wc: CALIBDCD_PLAN.spec["generation"],
        lm=lambda wc: CALIBDCD_PLAN.spec["lm"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.features(wc.model, wc.dataset, wc.scope), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    resources:
        **sized("calibdcd_features"),
    log:
        PLAN.stage_log("calibdcd_features", "calibdcd/features"),
    benchmark:
        PLAN.stage_benchmark("calibdcd_features", "calibdcd/features")
    script:
        "../workflow_scripts/calibdcd_features.py"


rule calibdcd_veilprobe:
    input:
        generations=lambda wc: CALIBDCD_PLAN.features(wc.model, wc.dataset, ORIGINAL_SCOPE).path("generations.parquet"),
        calibration=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("calibration.parquet") for s in SEEDS],
    output:
        original=PLAN.pattern("calibdcd/veilprobe", "features-original.parquet"),
        views=PLAN.pattern("calibdcd/veilprobe", "features-views.parquet"),
        mapping=directory(PLAN.pattern("calibdcd/veilprobe", "mapping")),
        manifest=PLAN.pattern("calibdcd/veilprobe", "manifest.json"),
    params:
        views=lambda wc: CALIBDCD_PLAN.views(wc.model, VIEWS_SCOPE),
        mapping=lambda wc: CALIBDCD_PLAN.spec["detectors"]["veilprobe"]["mapping"],
        lm=lambda wc: CALIBDCD_PLAN.spec["lm"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.veilprobe(wc.model, wc.dataset), wc).manifest,
    priority: 5
    threads: 1
    resources:
        **sized("calibdcd_veilprobe"),
    log:
        PLAN.stage_log("calibdcd_veilprobe", "calibdcd/veilprobe"),
    benchmark:
        PLAN.stage_benchmark("calibdcd_veilprobe", "calibdcd/veilprobe")
    script:
        "../workflow_scripts/calibdcd_veilprobe.py"


rule calibdcd_calibrate:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        supervised=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("supervised.parquet") for s in SEEDS],
        calibration=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("calibration.parquet") for s in SEEDS],
        evaluation=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("evaluation.parquet") for s in SEEDS],
        original=lambda wc: [stage.path(name) for det in CALIBDCD_DETECTORS
                             for stage, name in CALIBDCD_PLAN.feature_tables(wc.model, wc.dataset, det)[:1]],
        views=lambda wc: [stage.path(name) for det in CALIBDCD_DETECTORS
                          for stage, name in CALIBDCD_PLAN.feature_tables(wc.model, wc.dataset, det)[1:]],
    output:
        scores=CALIBDCD_PLAN.score_patterns("scores.parquet"),
        views=CALIBDCD_PLAN.score_patterns("views.parquet"),
        objective=CALIBDCD_PLAN.score_patterns("objective.parquet"),
        summary=CALIBDCD_PLAN.score_patterns("summary.json"),
        manifest=PLAN.pattern("calibdcd/scores", "manifest.json"),
    params:
        spec=lambda wc: {k: CALIBDCD_PLAN.spec[k] for k in ("variants", "tau", "tolerance")},
        detectors=CALIBDCD_DETECTORS,
        seeds=SEEDS,
        manifest=lambda wc: _checked(CALIBDCD_PLAN.score_run(wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    log:
        PLAN.stage_log("calibdcd_calibrate", "calibdcd/scores"),
    benchmark:
        PLAN.stage_benchmark("calibdcd_calibrate", "calibdcd/scores")
    script:
        "../workflow_scripts/calibdcd_calibrate.py"


rule calibdcd_report:
    input:
        scores=[CALIBDCD_PLAN.scores(*run).path("scores.parquet") for run in CALIBDCD_RUNS],
        summaries=[CALIBDCD_PLAN.scores(*run).path("summary.json") for run in CALIBDCD_RUNS],
        views=[CALIBDCD_PLAN.scores(*run).path("views.parquet") for run in CALIBDCD_RUNS],
        # the likelihood baselines on the same splits, beside the uncalibrated detectors
        baselines=[scores_file(m, d, s) for m, d in CALIBDCD_PAIRS for s in SEEDS] if CALIBDCD_BASELINES else [],
    output:
        markdown=CALIBDCD_REPORT["markdown"],
        main=report(CALIBDCD_REPORT["main"], category="CalibDCD"),
        ablations=report(CALIBDCD_REPORT["ablations"], category="CalibDCD"),
        recovery=report(CALIBDCD_REPORT["recovery"], category="CalibDCD"),
        selection=CALIBDCD_REPORT["selection"],
        views=CALIBDCD_REPORT["views"],
    params:
        runs=CALIBDCD_RUNS,
        baseline_runs=[(m, d, s) for m, d in CALIBDCD_PAIRS for s in SEEDS],
        baselines=CALIBDCD_BASELINES,
        fpr_targets=config["evaluation"]["fpr_targets"],
        bootstrap=config["evaluation"]["bootstrap"],
        paper_targets=config["paper_targets"],
    log:
        PLAN.log("calibdcd_report"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/calibdcd_report.py"


rule calibdcd:
    input:
        list(CALIBDCD_REPORT.values()) if CALIBDCD_PAIRS else [],
