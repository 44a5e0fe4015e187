# N-Sampling (Hallinan et al. 2025, generalised in the ADRA paper): N sampled continuations of each
# candidate's prefix, scored with every reconstruction metric (average- and best-of-N); each metric is
# a membership score in the results table. Config section `n_sampling:` (schemas/config.schema.yaml);
# absent = not run. Stage keys: mialab/n_sampling/plan.py (NS_PLAN: METHOD_PLANS,
# rules/common.smk); the jobs:
# mialab/n_sampling/stages.py.
#
# - n_sampling_rollouts (model, dataset): the dataset's task (prompt template + prefix, optional
#   assistant prefix of the first p% of the suffix), N rollouts at temperature 1.0, top-p 0.95,
#   top-k 50, each seed's split under its own sampling seed; seed-<s>/rollouts.parquet (id, sample,
#   text, n_tokens, finish_reason). One job loads the model once for every seed.
# - n_sampling_scores (model, dataset): every metric of every rollout (suffix-only by default),
#   AoN and BoN per candidate; columns n_sampling/<metric>@<aon|bon> join the results table through
#   SCORE_PROVIDERS. `snakemake n_sampling` builds them all.
from mialab.n_sampling.plan import METHOD as NS_METHOD

NS_PLAN = METHOD_PLANS["n_sampling"]  # mialab.n_sampling.method


rule n_sampling_rollouts:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        model=lambda wc: model_dir(wc.model),
    output:
        rollouts=PLAN.seed_patterns("n_sampling/rollouts", "rollouts.parquet"),
        manifest=PLAN.pattern("n_sampling/rollouts", "manifest.json"),
    params:
        model_path=lambda wc: PLAN.model_path(wc.model),
        samplings=lambda wc: [NS_PLAN.sampling(s) for s in SEEDS],
        manifest=lambda wc: _checked(NS_PLAN.rollout_run(wc.model, wc.dataset), wc).manifest,
    priority: 5  # long jobs first (after training), so the short ones fill the cores at the end
    threads: 1
    resources:
        **sized("n_sampling_rollouts"),
    log:
        PLAN.stage_log("n_sampling_rollouts", "n_sampling/rollouts"),
    benchmark:
        PLAN.stage_benchmark("n_sampling_rollouts", "n_sampling/rollouts")
    script:
        "../workflow_scripts/n_sampling_rollouts.py"


rule n_sampling_scores:
    input:
        splits=lambda wc: [split_file(wc.dataset, s) for s in SEEDS],
        rollouts=lambda wc: [NS_PLAN.rollouts(wc.model, wc.dataset, s).path("rollouts.parquet") for s in SEEDS],
    output:
        scores=PLAN.seed_patterns("n_sampling/scores", "scores.parquet"),
        rollout_metrics=PLAN.seed_patterns("n_sampling/scores", "rollout_metrics.parquet"),
        manifest=PLAN.pattern("n_sampling/scores", "manifest.json"),
    params:
        method=NS_METHOD,
        manifest=lambda wc: _checked(NS_PLAN.score_run(wc.model, wc.dataset), wc).manifest,
    threads: 1
    resources:
        **sized("n_sampling_scores"),
    log:
        PLAN.stage_log("n_sampling_scores", "n_sampling/scores"),
    benchmark:
        PLAN.stage_benchmark("n_sampling_scores", "n_sampling/scores")
    script:
        "../workflow_scripts/n_sampling_scores.py"


rule n_sampling:
    input:
        [NS_PLAN.scores_file(m, d, s) for m, d in NS_PLAN.pairs() for s in SEEDS],
