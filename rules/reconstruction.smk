# N-Sampling (Hallinan et al. 2025, generalised in the ADRA paper): N sampled continuations of each
# candidate's prefix, scored with every reconstruction metric (average- and best-of-N); each metric is
# a membership score in the results table. Config section `n_sampling:` (schemas/config.schema.yaml);
# absent = not run. Stage keys: mialab/adra/plan.py; the jobs: mialab/adra/stages.py.
#
# - n_sampling_rollouts (model, dataset, seed): the dataset's task (prompt template + prefix, optional
#   assistant prefix of the first p% of the suffix), N rollouts at temperature 1.0, top-p 0.95,
#   top-k 50, seeded; rollouts.parquet (id, sample, text, n_tokens, finish_reason).
# - n_sampling_scores (model, dataset, seed): every metric of every rollout (suffix-only by default),
#   AoN and BoN per candidate; columns n_sampling/<metric>@<aon|bon> join the results table through
#   SCORE_PROVIDERS. `snakemake n_sampling` builds them all.
from mialab.adra.plan import NSamplingPlan

NS_PLAN = NSamplingPlan(PLAN, config)

SCORE_PROVIDERS.append(NS_PLAN.scores_file)


rule n_sampling_rollouts:
    input:
        split=lambda wc: split_file(wc.dataset, int(wc.seed)),
        model=lambda wc: model_dir(wc.model),
    output:
        rollouts="results/n_sampling/rollouts/{model}/{dataset}/seed-{seed}/{key}/rollouts.parquet",
        manifest="results/n_sampling/rollouts/{model}/{dataset}/seed-{seed}/{key}/manifest.json",
    params:
        model_path=lambda wc: PLAN.model_path(wc.model),
        manifest=lambda wc: _checked(NS_PLAN.rollouts(wc.model, wc.dataset, int(wc.seed)), wc).manifest,
    threads: 1
    conda:
        "../environment.yml"
    log:
        "results/logs/n_sampling_rollouts/{model}/{dataset}/seed-{seed}/{key}.log",
    benchmark:
        "results/benchmarks/n_sampling_rollouts/{model}/{dataset}/seed-{seed}/{key}.tsv"
    script:
        "../workflow_scripts/n_sampling_rollouts.py"


rule n_sampling_scores:
    input:
        split=lambda wc: split_file(wc.dataset, int(wc.seed)),
        rollouts=lambda wc: NS_PLAN.rollouts(wc.model, wc.dataset, int(wc.seed)).path("rollouts.parquet"),
    output:
        scores="results/n_sampling/scores/{model}/{dataset}/seed-{seed}/{key}/scores.parquet",
        rollout_metrics="results/n_sampling/scores/{model}/{dataset}/seed-{seed}/{key}/rollout_metrics.parquet",
        manifest="results/n_sampling/scores/{model}/{dataset}/seed-{seed}/{key}/manifest.json",
    params:
        method="n_sampling",
        manifest=lambda wc: _checked(NS_PLAN.scores(wc.model, wc.dataset, int(wc.seed)), wc).manifest,
    threads: 1
    conda:
        "../environment.yml"
    log:
        "results/logs/n_sampling_scores/{model}/{dataset}/seed-{seed}/{key}.log",
    benchmark:
        "results/benchmarks/n_sampling_scores/{model}/{dataset}/seed-{seed}/{key}.tsv"
    script:
        "../workflow_scripts/n_sampling_scores.py"


rule n_sampling:
    input:
        [NS_PLAN.scores_file(m, d, s) for m, d in NS_PLAN.pairs() for s in SEEDS],
