# ADRA / ADRA+ (Yin et al. 2026, active data reconstruction attack): GRPO with LoRA on the evaluation
# candidates themselves (unlabelled), then N rollouts from the trained policy scored like N-Sampling.
# Config section `adra:` (needs `n_sampling:`, whose tasks, N and metrics it shares); absent = not run.
# Tiny world: the overlay configs/tiny_adra.yaml (`--configfile config.yaml configs/tiny_adra.yaml`);
# paper scale: configs/paper/adra_*.yaml.
# Stage keys: mialab/adra/plan.py (ADRA_PLAN: METHOD_PLANS, rules/common.smk); the jobs: mialab/adra/stages.py;
# training: mialab/adra/training.py.
#
# - adra_train (model, dataset, variant, seed): variant adra (reward against the own suffix), adra_plus
#   (contrastive reward against K distractor suffixes, weighted by the passive baseline of
#   score_baselines on the same split) or adra_sft (the SFT ablation, same budget). Trainer
#   checkpoints every save_steps go to work/, which a failed or preempted job leaves behind: the
#   retry resumes from the last one. adapters/ holds the policies of adra.eval.steps and the final one.
# - adra_eval (model, dataset, seed, policy): N rollouts at the evaluation temperature from a policy:
#   init (the untrained model, step 0), <variant>-step<k> or <variant>-final.
# - adra_scores: as n_sampling_scores; the final policies' columns (adra/..., adra_plus/...,
#   adra_sft/...) and the untrained policy's (adra_init/..., where step 0 is evaluated) join the results
#   table through SCORE_PROVIDERS; intermediate steps stay in the report.
# - adra_report (dataset, every N-Sampling dataset): top-5 / primary-metric AUROC of N-Sampling, ADRA
#   where it runs and the best passive baseline, AUROC against the RL step and the config's paper targets on the
#   dataset beside the run's figures (paper_targets); `snakemake adra` builds them and all they need.
ADRA_PLAN = METHOD_PLANS["adra"]  # mialab.adra.method

rule adra_train:
    input:
        unpack(lambda wc: ADRA_PLAN.baseline_input(wc.model, wc.dataset, wc.variant, wc.seed)),
        split=lambda wc: split_file(wc.dataset, int(wc.seed)),
        model=lambda wc: model_dir(wc.model),
    output:
        adapters=directory(PLAN.pattern("adra/train", "adapters")),
        training_set=PLAN.pattern("adra/train", "training_set.parquet"),
        log=PLAN.pattern("adra/train", "log.parquet"),
        manifest=PLAN.pattern("adra/train", "manifest.json"),
    params:
        model_path=lambda wc: PLAN.model_path(wc.model),
        trust=lambda wc: trust_flag(wc.model),
        baseline=lambda wc, input: shlex.join(["--baseline-scores", input.baseline]) if input.get("baseline") else "",
        manifest=lambda wc: json.dumps(
            _checked(ADRA_PLAN.train(wc.model, wc.dataset, wc.variant, int(wc.seed)), wc).manifest
        ),
        work=PLAN.pattern("adra/train", "work"),
        nproc=config["launch"]["nproc"],
    threads: 2
    resources:
        **sized("adra_train"),
    log:
        PLAN.stage_log("adra_train", "adra/train"),
    benchmark:
        PLAN.stage_benchmark("adra_train", "adra/train")
    shell:
        '"$MIALAB_PYTHON" -m mialab.core.launch --nproc {params.nproc:q} "$MIALAB_SCRIPTS/adra_train.py"'
        " --model {params.model_path:q} {params.trust} --split {input.split:q} {params.baseline}"
        " --manifest {params.manifest:q} --work {params.work:q} --out-adapters {output.adapters:q}"
        " --out-training-set {output.training_set:q} --out-log {output.log:q}"
        " --out-manifest {output.manifest:q} --threads {threads} > {log:q} 2>&1"


rule adra_eval:
    input:
        unpack(lambda wc: ADRA_PLAN.adapters_input(wc.model, wc.dataset, wc.seed, wc.policy)),
        splits=lambda wc: [split_file(wc.dataset, int(wc.seed))],
        model=lambda wc: model_dir(wc.model),
    output:
        rollouts=[PLAN.pattern("adra/rollouts", "rollouts.parquet")],
        manifest=PLAN.pattern("adra/rollouts", "manifest.json"),
    params:
        model_path=lambda wc: PLAN.model_path(wc.model),
        samplings=lambda wc: [ADRA_PLAN.sampling(int(wc.seed))],
        manifest=lambda wc: _checked(ADRA_PLAN.rollouts(wc.model, wc.dataset, int(wc.seed), wc.policy), wc).manifest,
    threads: 1
    resources:
        **sized("adra_eval"),
    log:
        PLAN.stage_log("adra_eval", "adra/rollouts"),
    benchmark:
        PLAN.stage_benchmark("adra_eval", "adra/rollouts")
    script:
        "../workflow_scripts/n_sampling_rollouts.py"


rule adra_scores:
    input:
        splits=lambda wc: [split_file(wc.dataset, int(wc.seed))],
        rollouts=lambda wc: [ADRA_PLAN.rollouts(wc.model, wc.dataset, int(wc.seed), wc.policy).path("rollouts.parquet")],
    output:
        scores=[PLAN.pattern("adra/scores", "scores.parquet")],
        rollout_metrics=[PLAN.pattern("adra/scores", "rollout_metrics.parquet")],
        manifest=PLAN.pattern("adra/scores", "manifest.json"),
    params:
        method=lambda wc: ADRA_PLAN.method(wc.policy),
        manifest=lambda wc: _checked(ADRA_PLAN.scores(wc.model, wc.dataset, int(wc.seed), wc.policy), wc).manifest,
    threads: 1
    resources:
        **sized("adra_scores"),
    log:
        PLAN.stage_log("adra_scores", "adra/scores"),
    benchmark:
        PLAN.stage_benchmark("adra_scores", "adra/scores")
    script:
        "../workflow_scripts/n_sampling_scores.py"


rule adra_report:
    input:
        scores=lambda wc: [path for _, path in ADRA_PLAN.report_tables(wc.dataset, SEEDS)],
        logs=lambda wc: [path for _, path in ADRA_PLAN.report_logs(wc.dataset, SEEDS)],
    output:
        markdown=ADRA_PLAN.report_outputs("{dataset}")["adra.md"],
        table=report(ADRA_PLAN.report_outputs("{dataset}")["adra.csv"], category="ADRA", subcategory="{dataset}"),
        steps=report(ADRA_PLAN.report_outputs("{dataset}")["steps.png"], category="ADRA", subcategory="{dataset}"),
    params:
        runs=lambda wc: [run for run, _ in ADRA_PLAN.report_tables(wc.dataset, SEEDS)],
        trains=lambda wc: [run for run, _ in ADRA_PLAN.report_logs(wc.dataset, SEEDS)],
        primary=config.get("n_sampling", {}).get("primary_metric"),
        fpr_targets=config["evaluation"]["fpr_targets"],
        paper_targets=lambda wc: paper_targets(wc.dataset),
        bootstrap=config["evaluation"]["bootstrap"],
    log:
        PLAN.log("adra_report", "{dataset}"),
    localrule: True  # bookkeeping: on the submitting node, not a job in the queue (docs/slurm.md)
    script:
        "../workflow_scripts/adra_report.py"


rule adra:
    input:
        [path for d in ADRA_PLAN.report_datasets() for path in ADRA_PLAN.report_outputs(d).values()],
