"""The real workflow (a reduced tiny world) through `snakemake --profile profiles/slurm` on the
single-node test SLURM, then the accounting table: what a cluster user runs, end to end."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, VENV_BIN
from workflow_helpers import foundation_config, make_workdir

pytestmark = pytest.mark.slow


def reduced_config() -> dict:
    """The tiny world's spine with one seed and a few training steps: scheduling, not accuracy, is
    tested (the method stages run in the local end-to-end test)."""
    cfg = foundation_config()
    cfg["seeds"] = [0]
    for ds in cfg["datasets"].values():
        ds["split"]["n_per_class"] = 16
    for name in ("base", "control"):
        cfg["models"][name]["train"]["steps"] = 8
    cfg["models"]["sft"]["members"]["repeats"] = 1
    cfg["models"]["sft"]["train"]["epochs"] = 1
    cfg["tokenizer"]["vocab_size"] = 1024
    # the test node's eight GPUs are fake: a training job runs one CPU process (what `auto` finds there),
    # and the plan-time checks (mialab.cluster_checks) must not count eight
    cfg["launch"] = {"nproc": 1}
    return cfg


def run(workdir: Path, env: dict, *args: str) -> str:
    cmd = [str(VENV_BIN / "snakemake"), "--profile", "profiles/slurm", "--snakefile", str(REPO / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"),
           "--slurm-init-seconds-before-status-checks", "2", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"snakemake failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-8000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def slurm_world(slurm_env):
    workdir = make_workdir(Path(tempfile.mkdtemp(prefix="mialab-slurm-world-")), reduced_config())
    start = time.monotonic()
    log = run(workdir, slurm_env)
    seconds = time.monotonic() - start
    # no accounting command: the workflow's onsuccess hook writes it at the end of every SLURM run
    jobs = pd.read_parquet(workdir / "results/accounting/jobs.parquet")
    print(f"reduced tiny world through SLURM: {seconds:.0f}s, {len(jobs)} jobs")
    yield {"workdir": workdir, "env": slurm_env, "log": log, "jobs": jobs}
    shutil.rmtree(workdir)


def test_tiny_world_completes_through_slurm(slurm_world):
    r = slurm_world["workdir"] / "results"
    summary = pd.read_parquet(r / "evaluation/summary.parquet")
    assert {"aime", "wikimia"} == set(summary["dataset"]) and {"base", "control", "sft"} == set(summary["model"])
    assert "has been submitted with SLURM jobid" in slurm_world["log"]


def test_training_rules_get_eight_gpus_scoring_one_and_evaluation_none(slurm_world):
    jobs = slurm_world["jobs"].set_index("rule")
    for rule in ("pretrain_model", "sft_contaminate"):
        assert (jobs.loc[[rule], "alloc_gpus"] == 8).all(), jobs.loc[[rule]]
    assert (jobs.loc[["score_baselines"], "alloc_gpus"] == 1).all()
    assert (jobs.loc[["build_split", "evaluate_dataset", "summarize"], "alloc_gpus"] == 0).all()


def test_accounting_has_every_rule_with_wildcards_and_time(slurm_world):
    jobs = slurm_world["jobs"]
    expected = {"build_pool", "build_split", "train_tokenizer", "pretrain_model", "sft_contaminate",
                "score_baselines", "evaluate_dataset", "summarize"}
    assert expected <= set(jobs["rule"])
    assert (jobs["elapsed_s"] > 0).all()
    scored = jobs[jobs["rule"] == "score_baselines"]
    assert len(scored) == 6 and set(scored["dataset"]) == {"aime", "wikimia"}
    assert set(scored["model"]) == {"base", "control", "sft"}
    gpu_hours = jobs.loc[jobs["rule"] == "pretrain_model", "gpu_hours"]
    assert (gpu_hours > 0).all()
    assert (slurm_world["workdir"] / "results/accounting/jobs.md").read_text().count("pretrain_model") >= 2


def test_accounting_refresh_by_hand_matches_the_hook(slurm_world):
    """The README's refresh command rewrites the same table the onsuccess hook wrote."""
    workdir = slurm_world["workdir"]
    run(workdir, slurm_world["env"], "--forcerun", "accounting", "--", "accounting")
    again = pd.read_parquet(workdir / "results/accounting/jobs.parquet")
    assert set(again["job_id"]) == set(slurm_world["jobs"]["job_id"])
