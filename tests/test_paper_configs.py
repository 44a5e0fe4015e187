"""Every paper-scale config runs as its header says (`Run:`, from the repository root, no config.yaml
merged in) and plans the jobs its header lists (`# jobs:`), all of them of its own models and datasets;
no download happens (hub ids are fine for a dry run)."""

from pathlib import Path

import pytest
import yaml
from workflow_helpers import PAPER_PLANS, REPO, check_command, jobs_line, run_line, validated

from mialab.lara.plan import LaRAPlan
from mialab.pipeline.plan import Plan
from mialab.pipeline.sizing import Sizing
from mialab.training.grpo import GRPOSettings, steps_per_epoch, update_arithmetic

CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))
TINY_WORLD_RULES = ("train_tokenizer", "pretrain_model")  # config.yaml's own models; no paper config trains one


def test_there_are_paper_configs():
    assert CONFIGS, "configs/paper/*.yaml is empty"


@PAPER_PLANS
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_paper_config_runs_as_its_header_says(path: Path):
    command = run_line(path)
    assert command == f"snakemake --profile profiles/slurm --configfile configs/paper/{path.name}", command
    jobs = check_command(command, jobs_line(path))
    assert jobs.get("all") == 1 and not set(TINY_WORLD_RULES) & set(jobs), jobs


def test_lara_config_audits_each_model_and_its_continued_rl_on_its_own_members():
    cfg = yaml.safe_load((REPO / "configs" / "paper" / "lara_rl_models.yaml").read_text())
    rl = {m: s for m, s in cfg["models"].items() if s["kind"] == "rl"}
    released = [m for m, s in cfg["models"].items() if s["kind"] == "hf"]
    assert sorted((s["init"], s["epoch"]) for s in rl.values()) == sorted((m, e) for m in released for e in (1, 2))
    for s in rl.values():
        assert s["members"]["dataset"] == cfg["models"][s["init"]]["datasets"][0] and s["corpus"]["size"] == 1000
        assert (s["train"]["lr"], s["train"]["num_generations"], s["train"]["beta"], s["train"]["epochs"]) == (1e-6, 4, 0.0, 2)
        assert s["train"]["max_completion_length"] == 4096
        assert s["train"]["entropy_coeff"] == 0.001   # verl's entropy bonus (the paper's 0.001)
    # verl's batches (eurus_grpo.sh) on the GPUs each rl_contaminate job gets: 128 prompts per rollout batch, 16
    # updates of 8 prompts each (ppo_mini_batch_size), 7 whole batches of the 1,000 prompts per epoch (drop_last)
    world = Sizing(validated(cfg), environ={}).job("rl_contaminate", model="eurus_prime_rl_e1").gpus
    settings = GRPOSettings.from_config(rl["eurus_prime_rl_e1"]["train"])
    assert update_arithmetic(settings, world) == {"rollout_prompts": 128, "update_prompts": 8,
                                                  "updates_per_rollout": 16}
    assert steps_per_epoch(1000, settings, world) == 7 * 16
    targets = [(t["model"], t["dataset"]) for t in cfg["lara"]["targets"]]
    assert set(targets) == {(m, s["datasets"][0]) for m, s in cfg["models"].items()}
    lara = LaRAPlan(Plan(validated(cfg)), cfg)  # lara.targets: each model on its own members, no cross pairs
    assert lara.pairs() == targets and lara.datasets() == list(cfg["datasets"])
