# RL contamination (GRPO checkpoints as models of kind `rl`, mialab.rl) and the LaRA stage
# (layer-wise representation analysis, mialab.lara). Config: `kind: rl` entries under `models:`
# and the `lara:` section (absent = no LaRA stage); schemas/config.schema.yaml. Stage keys:
# mialab/training/plan.py, mialab/lara/plan.py; the LaRA protocol: mialab/lara/stages.py.
#
# - rl_contaminate (run key, epoch): one epoch of a GRPO run on the member pool's members (or, with
#   members.split_seed, that split's members only) plus fillers. Epoch 1 starts from the run's `init`
#   model, epoch e resumes the trainer checkpoint of epoch e - 1 and keeps the full run's schedule,
#   so every epoch's weights equal those of one uninterrupted run. Its model/ is the `kind: rl`
#   model whose entry names that epoch. Periodic checkpoints go to work/, which a failed job leaves
#   behind: the retry resumes from the last one.
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
# - lara_report (dataset): the comparison table and the layer-wise figure; `snakemake lara` builds
#   them and everything they need.
from mialab.lara.plan import LaRAPlan
from mialab.training.plan import RLPlan
from mialab.pipeline.plan import seed_part

RL_PLAN = RLPlan(PLAN)
LARA_PLAN = LaRAPlan(PLAN, config)
LARA = config.get("lara")

SCORE_PROVIDERS.append(LARA_PLAN.scores_file)
for _ds in LARA_PLAN.datasets():
    EXTRA_TARGETS.extend(LARA_PLAN.report_outputs(_ds).values())


rule rl_contaminate:
    input:
        init=lambda wc: model_dir(RL_PLAN.spec(wc.key)["init"]),
        member_pool=lambda wc: member_pool_file(RL_PLAN.spec(wc.key)["members"]["dataset"]),
        member_split=lambda wc: RL_PLAN.member_split(wc.key),
        filler=lambda wc: local_files(RL_PLAN.spec(wc.key)["filler"]["source"]),
        previous=lambda wc: RL_PLAN.previous(wc.key, int(wc.epoch)),
    output:
        model=directory("results/rl/{key}/epoch-{epoch}/model"),
        trainer=directory("results/rl/{key}/epoch-{epoch}/trainer"),
        corpus="results/rl/{key}/epoch-{epoch}/corpus.parquet",
        log="results/rl/{key}/epoch-{epoch}/log.parquet",
        manifest="results/rl/{key}/epoch-{epoch}/manifest.json",
    wildcard_constraints:
        epoch=r"[1-9]\d*",
    params:
        init=lambda wc: PLAN.model_path(RL_PLAN.spec(wc.key)["init"]),
        trust_init=lambda wc: trust_flag(RL_PLAN.spec(wc.key)["init"]),
        spec=lambda wc: json.dumps(RL_PLAN.spec(wc.key)),
        manifest=lambda wc: json.dumps(RL_PLAN.manifest(wc.key, int(wc.epoch))),
        previous=lambda wc, input: shlex.join(["--previous", *input.previous]) if input.previous else "",
        member_split=lambda wc, input: shlex.join(["--member-split", *input.member_split]) if input.member_split else "",
        work="results/rl/{key}/epoch-{epoch}/work",
        nproc=config["launch"]["nproc"],
    priority: 10  # training is the critical path: schedule it before the cheap jobs
    threads: 2
    resources:
        **sized("rl_contaminate", model=lambda wc: RL_PLAN.spec(wc.key)["init"]),
    log:
        "results/logs/rl_contaminate/{key}/epoch-{epoch}.log",
    benchmark:
        "results/benchmarks/rl_contaminate/{key}/epoch-{epoch}.tsv"
    shell:
        '"$MIALAB_PYTHON" -m mialab.core.launch --nproc {params.nproc:q} "$MIALAB_SCRIPTS/rl_contaminate.py"'
        " --init {params.init:q} {params.trust_init} --member-pool {input.member_pool:q} {params.member_split}"
        " --spec {params.spec:q}"
        " --manifest {params.manifest:q} --epoch {wildcards.epoch:q} {params.previous} --work {params.work:q}"
        " --out-model {output.model:q} --out-trainer {output.trainer:q} --out-corpus {output.corpus:q}"
        " --out-log {output.log:q} --out-manifest {output.manifest:q} --threads {threads} > {log:q} 2>&1"


rule lara_perturbations:
    input:
        pool=lambda wc: pool_file(wc.dataset),
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
    output:
        tables=expand("results/lara/perturbations/{{dataset}}/{{key}}/seed-{seed}/perturbations.parquet", seed=SEEDS),
        manifest="results/lara/perturbations/{dataset}/{key}/manifest.json",
    params:
        spec=lambda wc: LARA_PLAN.perturbation_config(),
        seeds=SEEDS,
        manifest=lambda wc: _checked(LARA_PLAN.perturbation_run(wc.dataset), wc).manifest,
    threads: 1
    log:
        "results/logs/lara_perturbations/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/lara_perturbations/{dataset}/{key}.tsv"
    script:
        "../workflow_scripts/lara_perturbations.py"


rule lara_features:
    input:
        tables=lambda wc: [LARA_PLAN.perturbations(wc.dataset, s).path("perturbations.parquet") for s in SEEDS],
        model=lambda wc: model_dir(wc.model),
    output:
        index="results/lara/features/{model}/{dataset}/{key}/index.parquet",
        manifest="results/lara/features/{model}/{dataset}/{key}/manifest.json",
    params:
        spec=lambda wc: LARA["features"],
        model_path=lambda wc: PLAN.model_path(wc.model),
        manifest=lambda wc: _checked(LARA_PLAN.model_run("features", wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    resources:
        **sized("lara_features"),
    log:
        "results/logs/lara_features/{model}/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/lara_features/{model}/{dataset}/{key}.tsv"
    script:
        "../workflow_scripts/lara_features.py"


rule lara_baselines:
    input:
        tables=lambda wc: [LARA_PLAN.perturbations(wc.dataset, s).path("perturbations.parquet") for s in SEEDS],
        model=lambda wc: model_dir(wc.model),
    output:
        scores=expand("results/lara/baselines/{{model}}/{{dataset}}/{{key}}/seed-{seed}/baselines.parquet", seed=SEEDS),
        manifest="results/lara/baselines/{model}/{dataset}/{key}/manifest.json",
    params:
        spec=lambda wc: LARA["baselines"],
        model_path=lambda wc: PLAN.model_path(wc.model),
        manifest=lambda wc: _checked(LARA_PLAN.model_run("baselines", wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    resources:
        **sized("lara_baselines"),
    log:
        "results/logs/lara_baselines/{model}/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/lara_baselines/{model}/{dataset}/{key}.tsv"
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
        scores=expand("results/lara/scores/{{model}}/{{dataset}}/{{key}}/seed-{seed}/scores.parquet", seed=SEEDS),
        metrics=expand("results/lara/scores/{{model}}/{{dataset}}/{{key}}/seed-{seed}/metrics.parquet", seed=SEEDS),
        manifest="results/lara/scores/{model}/{dataset}/{key}/manifest.json",
    params:
        detection=lambda wc: LARA["detection"],
        betas=lambda wc: LARA["betas"],
        manifest=lambda wc: _checked(LARA_PLAN.score_run(wc.model, wc.dataset), wc).manifest,
    log:
        "results/logs/lara_scores/{model}/{dataset}/{key}.log",
    script:
        "../workflow_scripts/lara_scores.py"


rule lara_report:
    input:
        per_seed="results/evaluation/{dataset}/per_seed.parquet",
        metrics=lambda wc: [LARA_PLAN.scores(m, wc.dataset, s).path("metrics.parquet")
                            for m, s in LARA_PLAN.runs(wc.dataset, SEEDS)],
        splits=lambda wc: [split_file(wc.dataset, s) for _, s in LARA_PLAN.runs(wc.dataset, SEEDS)],
    output:
        markdown="results/lara/report/{dataset}/lara.md",
        table=report("results/lara/report/{dataset}/lara.csv", category="LaRA", subcategory="{dataset}"),
        layers=report("results/lara/report/{dataset}/layers.png", category="LaRA", subcategory="{dataset}"),
    params:
        runs=lambda wc: LARA_PLAN.runs(wc.dataset, SEEDS),
        models=lambda wc: LARA_PLAN.models(),
        fpr_targets=config["evaluation"]["fpr_targets"],
    log:
        "results/logs/lara_report/{dataset}.log",
    script:
        "../workflow_scripts/lara_report.py"


rule lara:
    input:
        [path for d in LARA_PLAN.datasets() for path in LARA_PLAN.report_outputs(d).values()],
