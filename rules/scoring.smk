# Passive baselines (Loss, R-Loss, Zlib, Min-K%, Min-K%++) on every (model, dataset, seed).


rule score_baselines:
    input:
        unpack(reference_scores),
        split=lambda wc: split_file(wc.dataset, int(wc.seed)),
        model=lambda wc: model_dir(wc.model),
    output:
        scores="results/scores/{model}/{dataset}/seed-{seed}/{key}/scores.parquet",
        manifest="results/scores/{model}/{dataset}/seed-{seed}/{key}/manifest.json",
    params:
        spec=config["scoring"],
        model_path=lambda wc: PLAN.model_path(wc.model),
        manifest=lambda wc: _checked(PLAN.scores(wc.model, wc.dataset, int(wc.seed)), wc).manifest,
    threads: 1
    conda:
        "../environment.yml"
    log:
        "results/logs/score_baselines/{model}/{dataset}/seed-{seed}/{key}.log",
    benchmark:
        "results/benchmarks/score_baselines/{model}/{dataset}/seed-{seed}/{key}.tsv"
    script:
        "../workflow_scripts/score_baselines.py"
