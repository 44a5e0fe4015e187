"""ADRA in the workflow: stage keys and config checks, its jobs in the default DAG and the paper-scale
configs, and (slow) a reduced tiny world where ADRA, ADRA+ and the SFT ablation train, evaluate and
reach the results table and the report."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mialab.adra.plan import INIT, ADRAPlan, NSamplingPlan
from mialab.config import ConfigError
from mialab.reconstruction.rewards import minmax_membership_weight
from mialab.workflow import Plan
from test_n_sampling_workflow import reduced_config as reduced_n_sampling_config
from test_n_sampling_workflow import validated
from workflow_helpers import REPO, default_config, make_workdir, planned_jobs, snakemake

PAPER_CONFIGS = sorted((REPO / "configs" / "paper").glob("adra_*.yaml"))


def adra_plan(cfg: dict) -> ADRAPlan:
    cfg = validated(cfg)
    return ADRAPlan(NSamplingPlan(Plan(cfg), cfg), cfg)


def test_the_untrained_policy_is_shared_and_only_adra_plus_depends_on_the_baseline_scores():
    cfg = default_config()
    a = adra_plan(cfg)
    model, dataset = a.pairs()[0]
    assert a.policies()[0] == INIT and "adra-final" in a.policies() and "adra_plus-final" in a.policies()
    assert "train" not in a.rollouts(model, dataset, 0, INIT).manifest["upstream"]
    baseline = a.train(model, dataset, "adra_plus", 0).manifest["upstream"]["baseline_scores"]
    assert baseline == a.plan.scores(model, dataset, 0).key
    changed = copy.deepcopy(cfg)
    changed["scoring"]["batch_size"] += 1  # new baseline scores: ADRA+ retrains, ADRA does not
    b = adra_plan(changed)
    assert b.train(model, dataset, "adra_plus", 0).key != a.train(model, dataset, "adra_plus", 0).key
    assert b.train(model, dataset, "adra", 0).key == a.train(model, dataset, "adra", 0).key
    evals = copy.deepcopy(cfg)
    evals["adra"]["eval"]["temperature"] = 0.5  # evaluation only: no retraining
    c = adra_plan(evals)
    assert c.train(model, dataset, "adra", 0).key == a.train(model, dataset, "adra", 0).key
    assert c.rollouts(model, dataset, 0, "adra-final").key != a.rollouts(model, dataset, 0, "adra-final").key


def test_training_settings_share_n_sampling_and_the_task():
    cfg = default_config()
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


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["adra"]["targets"].append({"model": "control", "dataset": "wikimia"}), "not an n_sampling target"),
    (lambda c: c["adra"]["eval"].update(steps=[0, c["adra"]["train"]["save_steps"] + 1]), "not a multiple"),
    (lambda c: c["adra"]["train"].update(batch_size=c["n_sampling"]["n"] * 4 + 1), "multiple of n_sampling.n"),
    (lambda c: c["scoring"].update(methods=["loss"]), "is not a score of scoring.methods"),
])
def test_config_errors_name_the_key(edit, message):
    cfg = default_config()
    edit(cfg)
    with pytest.raises(ConfigError, match=message):
        adra_plan(cfg)


def test_default_dag_runs_adra_on_every_target_seed_and_policy(tmp_path):
    cfg = default_config()
    jobs = planned_jobs(make_workdir(tmp_path, cfg), "adra")
    a = adra_plan(cfg)
    runs = len(a.pairs()) * len(cfg["seeds"])
    assert jobs["adra_train"] == runs * len(a.variants())
    assert jobs["adra_eval"] == jobs["adra_scores"] == runs * len(a.policies())
    assert jobs["adra_report"] == len(a.datasets()) and jobs["n_sampling_scores"] >= runs
    assert jobs["score_baselines"] >= runs  # ADRA+ waits for its membership weights


def test_there_are_paper_scale_adra_configs():
    assert {p.stem for p in PAPER_CONFIGS} >= {"adra_aime", "adra_pretraining"}


@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=[p.stem for p in PAPER_CONFIGS])
def test_paper_configs_validate_and_plan_adra(path: Path, tmp_path: Path):
    cfg = yaml.safe_load(path.read_text())
    jobs = planned_jobs(make_workdir(tmp_path, cfg), "adra")
    a = adra_plan(cfg)
    assert jobs["adra_train"] == len(a.pairs()) * len(cfg["seeds"]) * len(a.variants())
    assert cfg["n_sampling"]["n"] in (16, 32) and cfg["adra"]["train"]["lora"] == {
        "r": 64, "lora_alpha": 128, "target_modules": "all-linear"}


# --- end to end (slow) -------------------------------------------------------------------------

def reduced_config() -> dict:
    """N-Sampling's reduced world plus ADRA, ADRA+ and the SFT ablation: 4 GRPO steps of 4 prompts x
    2 rollouts, checkpoints every 2 steps, policies evaluated at steps 0, 2 and 4; one seed."""
    cfg = reduced_n_sampling_config()
    cfg["seeds"] = [0]
    cfg["adra"] = copy.deepcopy(default_config()["adra"])
    cfg["adra"].update(targets=[{"model": "base", "dataset": "wikimia32"}], variants=["adra", "adra_plus", "adra_sft"],
                       contrastive={"distractors": 3, "baseline": "min_k_plus_plus@0.2"},
                       eval={"temperature": 0.7, "top_p": 0.95, "top_k": 50, "steps": [0, 2]})
    cfg["adra"]["train"].update(max_steps=4, batch_size=8, save_steps=2, lora={"r": 4, "lora_alpha": 8,
                                                                             "target_modules": "all-linear"})
    return cfg


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    wd = make_workdir(tmp_path_factory.mktemp("adra_world"), reduced_config())
    snakemake(wd, "--cores", "2", timeout=3600)
    return wd


@pytest.mark.slow
def test_training_keeps_the_adapters_of_the_evaluated_steps_and_never_sees_labels(world):
    for variant in ("adra", "adra_plus", "adra_sft"):
        run = next((world / "results/adra/train/base/wikimia32" / variant).glob("seed-0/*"))
        assert {p.name for p in (run / "adapters").iterdir()} == {"step-2", "final"}
        assert (run / "adapters/final/adapter_config.json").is_file() and not (run / "work").exists()
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["global_step"] == 4 and manifest["config"]["variant"] == variant
        assert "label" not in pd.read_parquet(run / "training_set.parquet").columns
    plus = next((world / "results/adra/train/base/wikimia32/adra_plus").glob("seed-0/*"))
    data = pd.read_parquet(plus / "training_set.parquet")
    baseline = pd.read_parquet(next((world / "results/scores/base/wikimia32/seed-0").glob("*/scores.parquet")))
    expected = minmax_membership_weight(baseline.set_index("id").loc[data["id"], "min_k_plus_plus@0.2"])
    np.testing.assert_allclose(data["weight"], expected)
    assert all(len(json.loads(r)) == 4 for r in data["references"])  # own suffix + 3 distractors


@pytest.mark.slow
def test_final_policies_join_the_results_table_and_the_report_plots_every_step(world):
    summary = pd.read_parquet(world / "results/evaluation/summary.parquet")
    for method in ("adra", "adra_plus", "adra_sft", "n_sampling"):
        assert f"{method}/lcs_ratio_ref@bon" in set(summary["method"])
    assert not summary["method"].str.contains("@step|adra_init").any(), "intermediate policies stay in the report"
    report = pd.read_csv(world / "results/adra/report/wikimia32/adra.csv")
    steps = report.dropna(subset=["step"]).set_index("attack")["step"]
    assert steps["adra_init"] == 0 and steps["adra@step2"] == 2 and steps["adra_plus"] == 4
    assert {"passive", "n_sampling"} <= set(report["attack"])
    assert (world / "results/adra/report/wikimia32/steps.png").stat().st_size > 1000
    rollouts = list((world / "results/adra/rollouts/base/wikimia32/seed-0").glob("*/*/rollouts.parquet"))
    assert len(rollouts) == 1 + 3 * 2  # init, and steps 2 and final of each variant
