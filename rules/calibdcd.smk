# CalibDCD (calibrated feature-based detectors, mialab/calibdcd): partition -> features -> calibration
# of every variant -> report. Config section `calibdcd:` (schemas/config.schema.yaml); absent = not run.
# Stage keys: mialab/calibdcd/plan.py; the protocol: mialab/calibdcd/stages.py.
#
# - calibdcd_reference (dataset): DPDLLM's reference model, the base reference fine-tuned on every pool
#   text (labels are not read).
# - calibdcd_partition (dataset, seed): supervised split and known non-members D-cal from the pool
#   without the seed's common split; that split is the evaluation set.
# - calibdcd_features (model, dataset, scope): the target's outputs and DPDLLM's features; scope
#   `original` = the original query on every pool text (shared by all seeds, VeilProbe's prompts
#   too), scope `views` = the ten controlled views on every seed's D-cal (each text once; DPDLLM
#   only). One engine start per job.
# - calibdcd_veilprobe (model, dataset): VeilProbe's two mapping models, trained on the original
#   scope's generations, and its features of both scopes.
# - calibdcd_calibrate (model, dataset): every variant of every detector on every seed; a (detector,
#   seed)'s score table (columns calibdcd/<detector>/original and calibdcd/<detector>/<variant>,
#   in <key>/<detector>/seed-<s>/) joins the results table through SCORE_PROVIDERS.
# - calibdcd_report: the paper's tables (main results, ablations, false-positive recovery);
#   `snakemake calibdcd` builds it and everything it needs, nothing else.
from mialab.calibdcd.plan import ORIGINAL_SCOPE, SCOPES, VIEWS_SCOPE, CalibDCDPlan

CALIBDCD_PLAN = CalibDCDPlan(PLAN, config)
CALIBDCD_PAIRS = CALIBDCD_PLAN.pairs()
CALIBDCD_DETECTORS = CALIBDCD_PLAN.detectors()
CALIBDCD_RUNS = CALIBDCD_PLAN.runs(SEEDS)
CALIBDCD_BASELINES = CALIBDCD_PLAN.baselines()
CALIBDCD_REPORT = {
    "markdown": "results/calibdcd/report.md",
    "main": "results/calibdcd/main.csv",
    "ablations": "results/calibdcd/ablations.csv",
    "recovery": "results/calibdcd/recovery.csv",
    "selection": "results/calibdcd/selection.csv",
    "views": "results/calibdcd/views.csv",
}

for _det in CALIBDCD_DETECTORS:
    SCORE_PROVIDERS.append(
        lambda model, dataset, seed, det=_det: CALIBDCD_PLAN.scores(model, dataset, det, seed).path("scores.parquet")
        if (model, dataset) in CALIBDCD_PAIRS
        else None
    )
if CALIBDCD_PAIRS:
    EXTRA_TARGETS.extend(CALIBDCD_REPORT.values())


wildcard_constraints:
    scope="|".join(SCOPES),
    detector="dpdllm|veilprobe",


rule calibdcd_partition:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        split=lambda wc: split_file(wc.dataset, int(wc.seed)),
    output:
        supervised="results/calibdcd/partitions/{dataset}/seed-{seed}/{key}/supervised.parquet",
        calibration="results/calibdcd/partitions/{dataset}/seed-{seed}/{key}/calibration.parquet",
        evaluation="results/calibdcd/partitions/{dataset}/seed-{seed}/{key}/evaluation.parquet",
        manifest="results/calibdcd/partitions/{dataset}/seed-{seed}/{key}/manifest.json",
    params:
        spec=lambda wc: CALIBDCD_PLAN.spec["partition"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.partition(wc.dataset, int(wc.seed)), wc).manifest,
    log:
        "results/logs/calibdcd_partition/{dataset}/seed-{seed}/{key}.log",
    script:
        "../workflow_scripts/calibdcd_partition.py"


rule calibdcd_reference:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        base=lambda wc: model_dirs(CALIBDCD_PLAN.lm_models(("reference_model",))),
    output:
        model=directory("results/calibdcd/references/{dataset}/{key}/model"),
        manifest="results/calibdcd/references/{dataset}/{key}/manifest.json",
    params:
        base=lambda wc: CALIBDCD_PLAN.lm_path(CALIBDCD_PLAN.spec["detectors"]["dpdllm"]["reference_model"]),
        spec=lambda wc: CALIBDCD_PLAN.spec["detectors"]["dpdllm"],
        device=lambda wc: CALIBDCD_PLAN.spec["lm"]["device"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.reference(wc.dataset), wc).manifest,
    threads: 1
    log:
        "results/logs/calibdcd_reference/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/calibdcd_reference/{dataset}/{key}.tsv"
    script:
        "../workflow_scripts/calibdcd_reference.py"


rule calibdcd_features:
    input:
        unpack(
            lambda wc: {}
            if wc.scope == ORIGINAL_SCOPE
            else {"calibration": [CALIBDCD_PLAN.partition(wc.dataset, s).path("calibration.parquet") for s in SEEDS]}
        ),
        pool=lambda wc: pool_file(wc.dataset),
        model=lambda wc: model_dir(wc.model),
        lms=lambda wc: model_dirs(CALIBDCD_PLAN.lm_models(("key_token_model",))),
        reference=lambda wc: [CALIBDCD_PLAN.reference(wc.dataset).path("model")] if "dpdllm" in CALIBDCD_DETECTORS else [],
    output:
        features=expand(
            "results/calibdcd/features/{{model}}/{{dataset}}/{{scope}}/{{key}}/features-{det}.parquet",
            det=[d for d in CALIBDCD_DETECTORS if d != "veilprobe"],
        ),
        generations="results/calibdcd/features/{model}/{dataset}/{scope}/{key}/generations.parquet",
        manifest="results/calibdcd/features/{model}/{dataset}/{scope}/{key}/manifest.json",
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
        "results/logs/calibdcd_features/{model}/{dataset}/{scope}/{key}.log",
    benchmark:
        "results/benchmarks/calibdcd_features/{model}/{dataset}/{scope}/{key}.tsv"
    script:
        "../workflow_scripts/calibdcd_features.py"


rule calibdcd_veilprobe:
    input:
        generations=lambda wc: CALIBDCD_PLAN.features(wc.model, wc.dataset, ORIGINAL_SCOPE).path("generations.parquet"),
        calibration=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("calibration.parquet") for s in SEEDS],
    output:
        original="results/calibdcd/veilprobe/{model}/{dataset}/{key}/features-original.parquet",
        views="results/calibdcd/veilprobe/{model}/{dataset}/{key}/features-views.parquet",
        mapping=directory("results/calibdcd/veilprobe/{model}/{dataset}/{key}/mapping"),
        manifest="results/calibdcd/veilprobe/{model}/{dataset}/{key}/manifest.json",
    params:
        views=lambda wc: CALIBDCD_PLAN.views(wc.model, VIEWS_SCOPE),
        mapping=lambda wc: CALIBDCD_PLAN.spec["detectors"]["veilprobe"]["mapping"],
        lm=lambda wc: CALIBDCD_PLAN.spec["lm"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.veilprobe(wc.model, wc.dataset), wc).manifest,
    priority: 5
    threads: 1
    log:
        "results/logs/calibdcd_veilprobe/{model}/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/calibdcd_veilprobe/{model}/{dataset}/{key}.tsv"
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
        scores=expand(
            "results/calibdcd/scores/{{model}}/{{dataset}}/{{key}}/{det}/seed-{seed}/scores.parquet",
            det=CALIBDCD_DETECTORS,
            seed=SEEDS,
        ),
        views=expand(
            "results/calibdcd/scores/{{model}}/{{dataset}}/{{key}}/{det}/seed-{seed}/views.parquet",
            det=CALIBDCD_DETECTORS,
            seed=SEEDS,
        ),
        objective=expand(
            "results/calibdcd/scores/{{model}}/{{dataset}}/{{key}}/{det}/seed-{seed}/objective.parquet",
            det=CALIBDCD_DETECTORS,
            seed=SEEDS,
        ),
        summary=expand(
            "results/calibdcd/scores/{{model}}/{{dataset}}/{{key}}/{det}/seed-{seed}/summary.json",
            det=CALIBDCD_DETECTORS,
            seed=SEEDS,
        ),
        manifest="results/calibdcd/scores/{model}/{dataset}/{key}/manifest.json",
    params:
        spec=lambda wc: {k: CALIBDCD_PLAN.spec[k] for k in ("variants", "tau", "tolerance")},
        detectors=CALIBDCD_DETECTORS,
        seeds=SEEDS,
        manifest=lambda wc: _checked(CALIBDCD_PLAN.score_run(wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    log:
        "results/logs/calibdcd_calibrate/{model}/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/calibdcd_calibrate/{model}/{dataset}/{key}.tsv"
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
    log:
        "results/logs/calibdcd_report.log",
    script:
        "../workflow_scripts/calibdcd_report.py"


rule calibdcd:
    input:
        list(CALIBDCD_REPORT.values()) if CALIBDCD_PAIRS else [],
