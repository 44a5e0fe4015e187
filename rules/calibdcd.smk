# CalibDCD (calibrated feature-based detectors, mialab/calibdcd): partition -> features -> calibration
# of every variant -> report. Config section `calibdcd:` (schemas/config.schema.yaml); absent = not run.
# Stage keys: mialab/calibdcd/plan.py; the protocol: mialab/calibdcd/stages.py.
#
# - calibdcd_partition (dataset, seed): supervised split and known non-members D-cal from the pool
#   without the seed's common split; that split is the evaluation set.
# - calibdcd_features (model, dataset, scope): the target's greedy outputs and the detectors' features;
#   scope `original` = the original query on every pool text (shared by all seeds), scope
#   `views` = the ten controlled views on every seed's D-cal (each text once). One engine start per job.
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
    conda:
        "../environment.yml"
    log:
        "results/logs/calibdcd_partition/{dataset}/seed-{seed}/{key}.log",
    script:
        "../workflow_scripts/calibdcd_partition.py"


rule calibdcd_features:
    input:
        unpack(
            lambda wc: {}
            if wc.scope == ORIGINAL_SCOPE
            else {"calibration": [CALIBDCD_PLAN.partition(wc.dataset, s).path("calibration.parquet") for s in SEEDS]}
        ),
        pool=lambda wc: pool_file(wc.dataset),
        model=lambda wc: model_dir(wc.model),
        lms=lambda wc: model_dirs(CALIBDCD_PLAN.lm_models()),
    output:
        features=expand(
            "results/calibdcd/features/{{model}}/{{dataset}}/{{scope}}/{{key}}/features-{det}.parquet",
            det=CALIBDCD_DETECTORS,
        ),
        generations="results/calibdcd/features/{model}/{dataset}/{scope}/{key}/generations.parquet",
        manifest="results/calibdcd/features/{model}/{dataset}/{scope}/{key}/manifest.json",
    params:
        model_path=lambda wc: PLAN.model_path(wc.model),
        views=lambda wc: CALIBDCD_PLAN.views(wc.model, wc.scope),
        detectors=lambda wc: CALIBDCD_PLAN.detector_specs(CALIBDCD_PLAN.lm_path),
        generation=lambda wc: CALIBDCD_PLAN.spec["generation"],
        lm=lambda wc: CALIBDCD_PLAN.spec["lm"],
        manifest=lambda wc: _checked(CALIBDCD_PLAN.features(wc.model, wc.dataset, wc.scope), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    conda:
        "../environment.yml"
    log:
        "results/logs/calibdcd_features/{model}/{dataset}/{scope}/{key}.log",
    benchmark:
        "results/benchmarks/calibdcd_features/{model}/{dataset}/{scope}/{key}.tsv"
    script:
        "../workflow_scripts/calibdcd_features.py"


rule calibdcd_calibrate:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        supervised=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("supervised.parquet") for s in SEEDS],
        calibration=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("calibration.parquet") for s in SEEDS],
        evaluation=lambda wc: [CALIBDCD_PLAN.partition(wc.dataset, s).path("evaluation.parquet") for s in SEEDS],
        original=lambda wc: [CALIBDCD_PLAN.features(wc.model, wc.dataset, ORIGINAL_SCOPE).path(f"features-{det}.parquet")
                             for det in CALIBDCD_DETECTORS],
        views=lambda wc: [CALIBDCD_PLAN.features(wc.model, wc.dataset, VIEWS_SCOPE).path(f"features-{det}.parquet")
                          for det in CALIBDCD_DETECTORS],
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
    conda:
        "../environment.yml"
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
    output:
        markdown=CALIBDCD_REPORT["markdown"],
        main=report(CALIBDCD_REPORT["main"], category="CalibDCD"),
        ablations=report(CALIBDCD_REPORT["ablations"], category="CalibDCD"),
        recovery=report(CALIBDCD_REPORT["recovery"], category="CalibDCD"),
        selection=CALIBDCD_REPORT["selection"],
        views=CALIBDCD_REPORT["views"],
    params:
        runs=CALIBDCD_RUNS,
        fpr_targets=config["evaluation"]["fpr_targets"],
    conda:
        "../environment.yml"
    log:
        "results/logs/calibdcd_report.log",
    script:
        "../workflow_scripts/calibdcd_report.py"


rule calibdcd:
    input:
        list(CALIBDCD_REPORT.values()) if CALIBDCD_PAIRS else [],
