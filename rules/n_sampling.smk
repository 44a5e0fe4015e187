# N-Sampling (Hallinan et al. 2025, generalised in the ADRA paper): N sampled continuations of each
# candidate's prefix, scored with every reconstruction metric (average- and best-of-N); each metric is
# a membership score in the results table. Config section `n_sampling:` (schemas/config.schema.yaml);
# absent = not run. Stage keys: mialab/adra/plan.py; the jobs: mialab/adra/stages.py.
#
# - n_sampling_rollouts (model, dataset): the dataset's task (prompt template + prefix, optional
#   assistant prefix of the first p% of the suffix), N rollouts at temperature 1.0, top-p 0.95,
#   top-k 50, each seed's split under its own sampling seed; seed-<s>/rollouts.parquet (id, sample,
#   text, n_tokens, finish_reason). One job loads the model once for every seed.
# - n_sampling_scores (model, dataset): every metric of every rollout (suffix-only by default),
#   AoN and BoN per candidate; columns n_sampling/<metric>@<aon|bon> join the results table through
#   SCORE_PROVIDERS. `snakemake n_sampling` builds them all.
from mialab.n_sampling.plan import NSamplingPlan

NS_PLAN = NSamplingPlan(PLAN, config)

SCORE_PROVIDERS.append(NS_PLAN.scores_file)


rule n_sampling_rollouts:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        model=lambda wc: model_dir(wc.model),
    output:
        rollouts=expand("results/n_sampling/rollouts/{{model}}/{{dataset}}/{{key}}/seed-{seed}/rollouts.parquet",
                        seed=SEEDS),
        manifest="results/n_sampling/rollouts/{model}/{dataset}/{key}/manifest.json",
    params:
        model_path=lambda wc: PLAN.model_path(wc.model),
        samplings=lambda wc: [NS_PLAN.sampling(s) for s in SEEDS],
        manifest=lambda wc: _checked(NS_PLAN.rollout_run(wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    resources:
        **sized("n_sampling_rollouts"),
    log:
        "results/logs/n_sampling_rollouts/{model}/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/n_sampling_rollouts/{model}/{dataset}/{key}.tsv"
    script:
        "../workflow_scripts/n_sampling_rollouts.py"


rule n_sampling_scores:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        rollouts=lambda wc: [NS_PLAN.rollouts(wc.model, wc.dataset, s).path("rollouts.parquet") for s in SEEDS],
    output:
        scores=expand("results/n_sampling/scores/{{model}}/{{dataset}}/{{key}}/seed-{seed}/scores.parquet", seed=SEEDS),
        rollout_metrics=expand(
            "results/n_sampling/scores/{{model}}/{{dataset}}/{{key}}/seed-{seed}/rollout_metrics.parquet", seed=SEEDS),
        manifest="results/n_sampling/scores/{model}/{dataset}/{key}/manifest.json",
    params:
        method="n_sampling",
        manifest=lambda wc: _checked(NS_PLAN.score_run(wc.model, wc.dataset), wc).manifest,
    threads: 1
    resources:
        **sized("n_sampling_scores"),
    log:
        "results/logs/n_sampling_scores/{model}/{dataset}/{key}.log",
    benchmark:
        "results/benchmarks/n_sampling_scores/{model}/{dataset}/{key}.tsv"
    script:
        "../workflow_scripts/n_sampling_scores.py"


rule n_sampling:
    input:
        [NS_PLAN.scores_file(m, d, s) for m, d in NS_PLAN.pairs() for s in SEEDS],
