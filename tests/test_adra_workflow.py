"""ADRA in the workflow: stage keys and config checks, its jobs with the tiny-world overlay
configs/tiny_adra.yaml and in the paper-scale configs. (ADRA, ADRA+ and the SFT ablation train, evaluate and
reach the results table and the report in the SLURM rehearsal of configs/paper/adra_aime.yaml,
tests/test_slurm_workflow.py.)"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from workflow_helpers import (
    PAPER_PLANS,
    REPO,
    default_config,
    dry_run_as_documented,
    job_stats,
    make_workdir,
    merged_config,
    planned_jobs,
    run_line,
    snakemake,
    validated,
)

from mialab.adra.plan import INIT, ADRAPlan
from mialab.n_sampling.plan import NSamplingPlan
from mialab.pipeline.config import ConfigError
from mialab.pipeline.plan import Plan

PAPER_CONFIGS = sorted((REPO / "configs" / "paper").glob("adra_*.yaml"))
OVERLAY = REPO / "configs" / "tiny_adra.yaml"


def adra_config() -> dict:
    """The default tiny world with the ADRA overlay (configs/tiny_adra.yaml adds the `adra` section and sets
    N-Sampling's N and rollout lengths, which ADRA's GRPO groups share), merged as Snakemake merges them."""
    overlay = yaml.safe_load(OVERLAY.read_text())
    assert set(overlay) == {"overlay_of", "adra", "n_sampling"}, "the overlay adds adra and sets N-Sampling's sizes"
    assert set(overlay["n_sampling"]) == {"n", "tasks"}
    assert set(overlay["n_sampling"]["tasks"]) == set(default_config()["datasets"])
    assert all(set(t) == {"max_new_tokens"} for t in overlay["n_sampling"]["tasks"].values())
    return merged_config("config.yaml", str(OVERLAY.relative_to(REPO)))


def test_the_overlay_gives_grpo_a_group_the_default_n_sampling_would_not():
    """config.yaml's N-Sampling (a CPU budget) does not divide ADRA's batch; the overlay's N does, and its tasks keep
    config.yaml's templates and prompt budgets."""
    cfg, default = adra_config(), default_config()
    assert cfg["adra"]["train"]["batch_size"] % default["n_sampling"]["n"] != 0
    assert cfg["adra"]["train"]["batch_size"] % cfg["n_sampling"]["n"] == 0
    for name, task in cfg["n_sampling"]["tasks"].items():
        assert {k: v for k, v in task.items() if k != "max_new_tokens"} == \
            {k: v for k, v in default["n_sampling"]["tasks"][name].items() if k != "max_new_tokens"}
    with pytest.raises(ConfigError, match="multiple of n_sampling.n"):
        adra_plan({**cfg, "n_sampling": default["n_sampling"]})


def adra_plan(cfg: dict) -> ADRAPlan:
    cfg = validated(cfg)
    return ADRAPlan(NSamplingPlan(Plan(cfg), cfg), cfg)


def test_the_untrained_policy_is_shared_and_only_adra_plus_depends_on_the_baseline_scores():
    cfg = adra_config()
    a = adra_plan(cfg)
    model, dataset = a.pairs()[0]
    assert a.policies()[0] == INIT and "adra-final" in a.policies() and "adra_plus-final" in a.policies()
    assert "train" not in a.rollouts(model, dataset, 0, INIT).manifest["upstream"]
    baseline = a.train(model, dataset, "adra_plus", 0).manifest["upstream"]["baseline_scores"]
    assert baseline == a.plan.scores(model, dataset, 0).key
    changed = copy.deepcopy(cfg)
    changed["scoring"]["max_length"] -= 1  # new baseline scores: ADRA+ retrains, ADRA does not
    b = adra_plan(changed)
    assert b.train(model, dataset, "adra_plus", 0).key != a.train(model, dataset, "adra_plus", 0).key
    assert b.train(model, dataset, "adra", 0).key == a.train(model, dataset, "adra", 0).key
    evals = copy.deepcopy(cfg)
    evals["adra"]["eval"]["temperature"] = 0.5  # evaluation only: no retraining
    c = adra_plan(evals)
    assert c.train(model, dataset, "adra", 0).key == a.train(model, dataset, "adra", 0).key
    assert c.rollouts(model, dataset, 0, "adra-final").key != a.rollouts(model, dataset, 0, "adra-final").key


def test_training_settings_share_n_sampling_and_the_task():
    cfg = adra_config()
    a = adra_plan(cfg)
    model, dataset = a.pairs()[0]
    s = a.settings(model, dataset, 0)
    task = cfg["n_sampling"]["tasks"][dataset]
    assert s["num_generations"] == cfg["n_sampling"]["n"] and s["temperature"] == 1.0 and s["top_k"] == 50
    assert s["max_completion_length"] == task["max_new_tokens"] and s["max_prompt_length"] == task["max_prompt_tokens"]
    assert s["seed"] != a.settings(model, dataset, 1)["seed"]
    assert a.method("adra-final") == "adra" and a.method("adra_plus-step8") == "adra_plus@step8"
    assert a.method(INIT) == "adra_init"
    with pytest.raises(ValueError, match="unknown policy"):
        a.parse_policy("adra-step0")


def test_one_epoch_over_each_seeds_candidates():
    cfg = adra_config()
    train, n = cfg["adra"]["train"], cfg["n_sampling"]["n"]
    (target,) = cfg["adra"]["targets"]
    candidates = 2 * cfg["datasets"][target["dataset"]]["split"]["n_per_class"]
    assert train["max_steps"] * train["batch_size"] // n == candidates


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["adra"]["targets"].append({"model": "control", "dataset": "wikimia"}), "not an n_sampling target"),
    (lambda c: c["adra"]["eval"].update(steps=[0, c["adra"]["train"]["save_steps"] + 1]), "not a multiple"),
    (lambda c: c["adra"]["eval"].update(steps=[0, c["adra"]["train"]["max_steps"]]), r"not before adra.train.max_steps"),
    (lambda c: c["adra"]["train"].update(batch_size=c["n_sampling"]["n"] * 4 + 1), "multiple of n_sampling.n"),
    (lambda c: c["scoring"].update(methods=["loss"]), "is not a score of scoring.methods"),
    (lambda c: c["adra"].update(datasets={"nowhere": {"random_suffixes": 3}}), "adra.datasets: 'nowhere'"),
    (lambda c: c["adra"]["reward"].update(metric="embedding"), "adra.reward.embedding_model"),
    (lambda c: c["adra"].update(datasets={c["adra"]["targets"][0]["dataset"]: {"contrastive": {"baseline": "ppl@1"}}}),
     r"adra.datasets.\w+.contrastive.baseline: 'ppl@1'"),
])
def test_config_errors_name_the_key(edit, message):
    cfg = adra_config()
    edit(cfg)
    with pytest.raises(ConfigError, match=message):
        adra_plan(cfg)


def test_per_dataset_reward_suffixes_and_prior_override_the_defaults():
    """The code's per-dataset settings: ngram for AIME, tau 2 for Olympiad, K random suffixes, the ADRA+ prior."""
    cfg = adra_config()
    d = cfg["adra"]["targets"][0]["dataset"]
    cfg["adra"]["datasets"] = {d: {"reward": {"metric": "ngram", "tau": 2.0}, "random_suffixes": 3,
                                   "contrastive": {"baseline": "loss", "reward": {"metric": "trio"}}}}
    a = adra_plan(cfg)
    m = cfg["adra"]["targets"][0]["model"]
    adra, plus = a.train(m, d, "adra", 0).manifest["config"], a.train(m, d, "adra_plus", 0).manifest["config"]
    assert adra["reward"] == {**cfg["adra"]["reward"], "metric": "ngram", "tau": 2.0} and adra["random_suffixes"] == 3
    assert plus["contrastive"] == {**cfg["adra"]["contrastive"], "baseline": "loss"}
    assert plus["reward"] == {**adra["reward"], "metric": "trio"}  # BookMIA: ngram for ADRA, trio for ADRA+
    assert adra["reward"]["ngram_range"] == "dynamic" and adra["reward"]["n_max"] == 30  # the code's defaults
    assert adra["distractor_sampling"] == "without_replacement"
    base = adra_plan(adra_config())
    assert base.train(m, d, "adra", 0).key != a.train(m, d, "adra", 0).key


def test_the_overlay_plans_adra_on_every_target_seed_and_policy(tmp_path):
    """The documented command: the default config.yaml and configs/tiny_adra.yaml on top of it."""
    wd = make_workdir(tmp_path)  # the default config.yaml
    jobs = planned_jobs(wd, "adra", "--configfile", str(wd / "config.yaml"), str(OVERLAY))
    cfg = adra_config()
    a = adra_plan(cfg)
    runs = len(a.pairs()) * len(cfg["seeds"])
    assert jobs["adra_train"] == runs * len(a.variants()) == 4
    assert jobs["adra_eval"] == jobs["adra_scores"] == runs * len(a.policies()) == 6  # init + 2 finals per seed
    assert jobs["adra_report"] == len(a.report_datasets()) == 2
    assert jobs["n_sampling_scores"] >= len(a.pairs())  # one N-Sampling job per target, every seed
    assert jobs["score_baselines"] >= len(a.pairs())      # ADRA+ waits for its weights
    # the results table joins each final policy and the untrained one (adra_init), not the intermediate steps
    for seed in cfg["seeds"]:
        assert a.init_scores_file("sft", "aime", seed) == a.scores("sft", "aime", seed, "init").path("scores.parquet")
    assert a.init_scores_file("base", "wikimia", 0) is None     # not an ADRA target
    proc = snakemake(wd, "-n", "evaluation", "--configfile", str(wd / "config.yaml"), str(OVERLAY))
    jobs = [b.split("\n[")[0] for b in (proc.stdout + proc.stderr).split("rule evaluate_dataset:")[1:]]  # to the next job
    inputs = [b.split("output:")[0] for b in jobs if "dataset=aime" in b][0]
    assert inputs.count("results/adra/scores/sft/aime/seed-") == len(cfg["seeds"]) * (1 + len(a.variants()))
    assert all(f"/seed-{s}/init/" in inputs for s in cfg["seeds"])


def test_the_recon_overlay_plans_its_model_and_both_attacks_on_wikimia_only(tmp_path):
    """configs/tiny_recon.yaml (the memorising setting): one extra SFT model, N-Sampling and ADRA on it."""
    wd = make_workdir(tmp_path)
    jobs = planned_jobs(wd, "n_sampling", "adra", "--configfile", str(wd / "config.yaml"),
                        str(REPO / "configs" / "tiny_recon.yaml"))
    seeds = len(yaml.safe_load((REPO / "configs" / "tiny_recon.yaml").read_text())["seeds"])  # its figures' seeds
    assert jobs["adra_train"] == 2 * seeds == 6 and jobs["n_sampling_rollouts"] == 1  # one job for every seed
    assert jobs["adra_report"] == 1  # wikimia only


def test_the_default_config_trains_no_adra():
    assert "adra" not in default_config()


@PAPER_PLANS
@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=[p.stem for p in PAPER_CONFIGS])
def test_paper_configs_plan_adra(path: Path):
    """The config's documented command (after prefetch) plans ADRA's runs: every (target, seed, variant)."""
    cfg = yaml.safe_load(path.read_text())
    proc = dry_run_as_documented(run_line(path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    jobs = job_stats(proc.stdout + proc.stderr)
    a = adra_plan(cfg)
    assert jobs["adra_train"] == len(a.pairs()) * len(cfg["seeds"]) * len(a.variants())
    assert cfg["n_sampling"]["n"] in (16, 32) and cfg["adra"]["train"]["lora"] == {
        "r": 64, "lora_alpha": 128, "target_modules": "all-linear"}


# (ADRA reward, tau, random suffixes; ADRA+ reward, distractors, prior) per dataset: the released code's
# scripts/**/prepare_*_lexical_adra{,-plus}.sh (METRIC_PROFILE, AUGMENT_NUM_SAMPLES, mia_weight_tag).
CODE_SETTINGS = {
    "aime": ("ngram", 1.5, 7, ("ngram", 7, "min_k_plus_plus@0.2")),
    "olympiad_math": ("trio", 2.0, 7, ("trio", 7, "min_k_plus_plus@0.2")),
    "aya": ("ngram", 1.5, 15, ("ngram", 15, "min_k_plus_plus@0.2")),
    "wildchat": ("ngram", 1.5, 7, ("ngram", 7, "min_k_plus_plus@0.2")),
    "bookmia": ("ngram", 1.5, 3, ("trio", 7, "min_k@0.2")),
    "wikimia_24_hard": ("trio", 1.5, 3, ("trio", 3, "min_k_plus_plus@0.2")),
    "dolma3_arxiv": ("trio", 1.5, 7, ("trio", 7, "loss")),
    "bookmia_paraphrased": ("trio", 1.5, 7, ("trio", 7, "min_k@0.2")),
    "wikimia_24_hard_paraphrased": ("trio", 1.5, 3, ("trio", 3, "min_k_plus_plus@0.2")),
    "dolma3_arxiv_paraphrased": ("trio", 1.5, 7, ("trio", 7, "loss")),
    "aime_paraphrased": ("ngram", 1.5, 7, ("ngram", 7, "min_k_plus_plus@0.2")),
    "olympiad_math_paraphrased": ("trio", 2.0, 7, ("trio", 7, "min_k_plus_plus@0.2")),
    "s1_1": ("trio", 1.25, 0, None),
    "s1": ("trio", 1.5, 0, None),
}
# datasets whose ADRA script leaves ADRA_USE_DYNAMIC_MAX_NGRAM unset: the n-gram range [3, 30], not the dynamic one
# (every ADRA+ script sets it)
FIXED_NGRAM_RANGE = {"aime", "aime_paraphrased", "aya", "wildchat", "bookmia"}
# the GRPO learning rate of the code's scripts: 3e-5 for AIME and distillation (the paper's Table 14: 5e-5), else 5e-5
CODE_LR = {"aime": 3e-5, "aime_paraphrased": 3e-5, "s1": 3e-5, "s1_1": 3e-5}


def test_paper_configs_use_the_codes_settings():
    seen = set()
    for path in PAPER_CONFIGS:
        cfg = validated(yaml.safe_load(path.read_text()))
        a, ns = adra_plan(cfg), cfg["n_sampling"]
        for model, dataset in a.pairs():
            seen.add(dataset)
            metric, tau, k, plus = CODE_SETTINGS[dataset]
            adra = a.train(model, dataset, "adra", 0).manifest["config"]
            assert (adra["reward"]["metric"], adra["reward"]["tau"], adra["random_suffixes"]) == (metric, tau, k), path
            code_range = [adra["reward"][key] for key in ("ngram_range", "n_max", "length_words")]
            if metric == "ngram":  # trio reads no n-gram range
                assert code_range == ["fixed" if dataset in FIXED_NGRAM_RANGE else "dynamic", 30, "whitespace"], dataset
            assert adra["distractor_sampling"] == "without_replacement" and adra["settings"]["weight_decay"] == 0.01
            assert adra["settings"]["lr"] == CODE_LR.get(dataset, 5e-5), (path.name, dataset)
            if plus is not None:
                p = a.train(model, dataset, "adra_plus", 0).manifest["config"]
                assert (p["reward"]["metric"], p["contrastive"]["distractors"], p["contrastive"]["baseline"]) == plus
                if plus[0] == "ngram":
                    assert (p["reward"]["ngram_range"], p["reward"]["n_max"]) == ("dynamic", 30), dataset
            # as verl: every prompt a chat through the model's template or verl's fallback, no special token added
            assert adra["prompt_format"] == "verl" and not ns["chat_models"], (path.name, model)
            pool = cfg["datasets"][dataset]["pool"]
            if pool["family"] in ("aime", "olympiad_math", "tulu3"):  # the request alone; 25% given once
                assert pool.get("solution_prefix_ratio", pool.get("response_prefix_ratio")) == 0.0
                assert ns["tasks"][dataset]["assistant_prefix_ratio"] == 0.25
            if pool["family"] in ("bookmia", "wikimia_24_hard", "dolma3_arxiv"):
                assert pool["prefix_ratio"] == 0.25 and ns["tasks"][dataset]["template"].startswith("code_")
            if "prefix_rounding" in pool:  # max(1, floor) words, then max(1, floor) of the rest (#20 7d)
                assert pool["prefix_rounding"] == "floor" and ns["tasks"][dataset]["assistant_prefix_min_words"] == 1
            if pool["family"] == "tulu3":
                assert pool["tokenizer"] == "allenai/Llama-3.1-Tulu-3-8B"
        assert ns["metrics"]["convention"] == "code" and ns["metrics"]["n_max"] == 30
    assert seen == set(CODE_SETTINGS)
    pre = yaml.safe_load((REPO / "configs" / "paper" / "adra_pretraining.yaml").read_text())["datasets"]
    assert pre["wikimia_24_hard"]["pool"]["source"]["split"] == "test"
    dolma = pre["dolma3_arxiv"]["pool"]
    assert (dolma["max_tokens"], dolma["tokenizer"]) == (2048, "allenai/tulu-2-7b")
