"""The real workflow through `snakemake --profile profiles/slurm` on the single-node test SLURM: the ADRA AIME paper
config rehearsed (what a cluster user runs, end to end) and the accounting table of its run; a pretraining job of
the tiny world requeued mid-way (`scontrol requeue`) that resumes to the same model; ADRA's workflow checks read
that rehearsal's outputs (the variants' adapters, training sets, ADRA+ weights, results table, rollouts)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, VENV_BIN
from test_rehearsal import adra_reports_written, rehearsal_written
from workflow_helpers import foundation_config, make_workdir, requeue, validated

from mialab.adra.rewards import minmax_membership_weight
from mialab.pipeline.rehearsal import rehearse

pytestmark = pytest.mark.slow


def reduced_config() -> dict:
    """The tiny world's spine with one seed and a few training steps (the requeue test's): scheduling, not
    accuracy, is tested (the method stages run in the local end-to-end test)."""
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
    # and the plan-time checks (mialab.pipeline.cluster_checks) must not count eight
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
def adra_aime(slurm_env):
    """configs/paper/adra_aime.yaml rehearsed through SLURM once (rehearse_through_slurm): the ADRA AIME test and the
    accounting tests read its run (contamination by DeepSpeed SFT, scoring, N-Sampling, ADRA: CPU and GPU jobs)."""
    cfg, workdir, jobs, log = rehearse_through_slurm("adra_aime", slurm_env)
    yield {"cfg": cfg, "workdir": workdir, "env": slurm_env, "log": log, "jobs": jobs}
    shutil.rmtree(workdir)


#: The bookkeeping rules that run on the submitting node (localrule), never a SLURM job.
LOCAL_RULES = {"build_split", "evaluate_dataset", "summarize", "leakage_summary", "adra_report"}


def test_jobs_get_the_gpus_their_code_uses(adra_aime):
    """sacct's AllocTRES (alloc_gpus) per job against mialab.pipeline.sizing's plan: the one-process training jobs
    (the rehearsal's launch.nproc 1) and forward passes one GPU each, CPU-only stand-ins and pools none."""
    jobs = adra_aime["jobs"].set_index("rule")
    for rule in ("sft_contaminate", "score_baselines", "adra_train"):
        assert (jobs.loc[[rule], "alloc_gpus"] == 1).all(), jobs.loc[[rule]]
    assert (jobs.loc[["rehearsal_model", "build_pool", "leakage_check"], "alloc_gpus"] == 0).all()


def test_accounting_has_every_rule_with_wildcards_and_time(adra_aime):
    jobs = adra_aime["jobs"]
    expected = {"build_pool", "rehearsal_model", "sft_contaminate", "score_baselines", "n_sampling_rollouts",
                "adra_train", "adra_eval"}
    assert expected <= set(jobs["rule"]) and not LOCAL_RULES & set(jobs["rule"])   # bookkeeping ran locally
    assert (jobs["elapsed_s"] > 0).all()
    scored = jobs[jobs["rule"] == "score_baselines"]
    assert len(scored) == 2 and set(scored["dataset"]) == {"aime"}
    assert set(scored["model"]) == {"tulu2_aime", "tulu2_7b"}      # the target and its R-Loss reference (pre-SFT)
    assert (scored["gpu_hours"] > 0).all()
    assert (adra_aime["workdir"] / "results/accounting/config/jobs.md").read_text().count("sft_contaminate") >= 2


def test_accounting_refresh_by_hand_matches_the_hook(adra_aime):
    """The README's refresh command rewrites the same table the onsuccess hook wrote."""
    workdir = adra_aime["workdir"]
    run(workdir, adra_aime["env"], "--config", "rehearsal=true", "--forcerun", "accounting", "--", "accounting")
    again = pd.read_parquet(workdir / "results/accounting/config/jobs.parquet")
    assert set(again["job_id"]) == set(adra_aime["jobs"]["job_id"])


def requeue_config() -> dict:
    """One pretrained model, long enough to be requeued after its first checkpoint."""
    cfg = reduced_config()
    cfg["datasets"] = {"wikimia": cfg["datasets"]["wikimia"]}
    cfg["models"] = {"base": cfg["models"]["base"]}
    cfg["models"]["base"].pop("reference", None)
    cfg["models"]["base"]["members"] = [m for m in cfg["models"]["base"]["members"] if m["dataset"] == "wikimia"]
    cfg["models"]["base"]["train"].update(steps=60, checkpoint_every=10)
    cfg["scoring"]["methods"] = ["loss"]
    cfg["evaluation"]["baseline"] = "loss"  # the headline's baseline is a column the config scores
    return cfg


def test_a_requeued_training_job_resumes_to_the_same_model(slurm_env, tmp_path):
    """`scontrol requeue` of a running pretraining job after its first checkpoint: SLURM runs it again
    (slurm-requeue), it resumes from that checkpoint, and the model is byte for byte the one an
    uninterrupted run (locally) trains."""
    from workflow_helpers import snakemake as local_snakemake

    workdir = make_workdir(Path(tempfile.mkdtemp(prefix="mialab-slurm-requeue-")), requeue_config())
    log_path = workdir / "snakemake.log"
    cmd = [str(VENV_BIN / "snakemake"), "--profile", "profiles/slurm", "--snakefile", str(REPO / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"),
           "--slurm-init-seconds-before-status-checks", "2", "models"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=slurm_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, job = time.monotonic() + 900, None
        while time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"SLURM jobid (\d+) \(log: \S*rule_pretrain_model", log_path.read_text())
            if found and list(workdir.glob("results/models/base/*/checkpoints/step-*")):
                job = found.group(1)
                break
            time.sleep(0.5)
        assert job, f"no checkpoint of the pretraining job:\n{log_path.read_text()[-4000:]}"
        requeue(job, slurm_env)
        assert proc.wait(timeout=900) == 0, log_path.read_text()[-6000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    (job_log,) = workdir.glob("results/logs/pretrain_model/base/*.log")
    assert "resuming pretraining from" in job_log.read_text()
    jobs = pd.read_parquet(workdir / "results/accounting/config/jobs.parquet")
    runs = jobs[jobs["job_id"] == job].sort_values("attempt")
    assert list(runs["state"]) == ["REQUEUED", "COMPLETED"]

    reference = make_workdir(tmp_path / "uninterrupted", requeue_config())
    local_snakemake(reference, "--cores", "2", "models", timeout=900)
    (model,) = workdir.glob("results/models/base/*/model")
    (expected,) = reference.glob("results/models/base/*/model")
    assert model.relative_to(workdir) == expected.relative_to(reference)   # the same stage key
    for f in sorted(expected.iterdir()):
        assert (model / f.name).read_bytes() == f.read_bytes(), f.name
    shutil.rmtree(workdir)


def rehearse_through_slurm(name: str, env: dict) -> tuple[dict, Path, pd.DataFrame, str]:
    """configs/paper/<name>.yaml as a CPU rehearsal (`--config rehearsal=true`, mialab.pipeline.rehearsal) through
    `profiles/slurm`: the plan-time checks see the paper config on the test node's GPUs and every job from the
    stand-ins to the reports is a SLURM job; what every rehearsal writes (test_rehearsal.rehearsal_written), and a
    second dry run has nothing to do. Returns the paper config, the working directory, the accounting table (the
    workflow's onsuccess hook writes it at the end of every SLURM run) and the run's log.

    Its generation jobs run on the hf backend, the rehearsal's fallback where the worker's environment has no vLLM
    (MIALAB_VLLM_VENV names none here): this test is about SLURM, and the rehearsals of tests/test_rehearsal.py run
    the vLLM backends where scripts/setup_vllm.sh built them."""
    import yaml

    cfg = yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text())
    workdir = make_workdir(Path(tempfile.mkdtemp(prefix=f"mialab-slurm-rehearsal-{name}-")), cfg)
    env = {**env, "MIALAB_VLLM_VENV": str(workdir / "no-vllm-venv")}
    start = time.monotonic()
    log = run(workdir, env, "--config", "rehearsal=true")
    print(f"{name} rehearsal through SLURM: {time.monotonic() - start:.0f}s")
    assert "has been submitted with SLURM jobid" in log and "mialab: rehearsal: models." in log
    assert "no working vLLM in the generation worker's environment" in log
    assert "Nothing to be done" in run(workdir, env, "-n", "--config", "rehearsal=true")
    rehearsal_written(name, workdir)
    return cfg, workdir, pd.read_parquet(workdir / "results/accounting/config/jobs.parquet"), log


def test_adra_aime_paper_config_rehearses_through_slurm(adra_aime):
    """adra_aime rehearsed through SLURM (rehearse_through_slurm): contamination by SFT, N-Sampling, ADRA / ADRA+ /
    the SFT ablation trained and evaluated at its steps, the report of Tables 12 and 14-15 (every variant's row)
    and Figure 2's steps."""
    adra_reports_written(adra_aime["cfg"], adra_aime["workdir"] / "results")
    assert {"rehearsal_model", "sft_contaminate", "n_sampling_rollouts", "adra_train", "adra_eval"} <= \
        set(adra_aime["jobs"]["rule"])


def test_adra_training_keeps_the_adapters_of_the_evaluated_steps_and_never_sees_labels(adra_aime):
    """Each variant's run keeps an adapter of each evaluated step and the final one, trains on a set without labels;
    ADRA+ weighs each candidate by the min-max of the baseline scores it read, beside its own suffix and distractors;
    the final policies join the results table, every evaluated policy was sampled."""
    cfg = rehearse(validated(adra_aime["cfg"]), vllm_available=False)
    ((model, dataset),) = [(t["model"], t["dataset"]) for t in cfg["adra"]["targets"]]
    results = adra_aime["workdir"] / "results"
    steps = [s for s in cfg["adra"]["eval"]["steps"] if s]
    for variant in cfg["adra"]["variants"]:
        (run,) = (results / "adra/train" / model / dataset / variant).glob("seed-0/*")
        assert {p.name for p in (run / "adapters").iterdir() if not p.name.startswith(".")} == \
            {*(f"step-{s}" for s in steps), "final"}
        assert (run / "adapters/final/adapter_config.json").is_file() and not (run / "work").exists()
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["global_step"] == cfg["adra"]["train"]["max_steps"] and manifest["config"]["variant"] == variant
        assert "label" not in pd.read_parquet(run / "training_set.parquet").columns
    (plus,) = (results / "adra/train" / model / dataset / "adra_plus").glob("seed-0/*")
    data = pd.read_parquet(plus / "training_set.parquet")
    key = json.loads((plus / "manifest.json").read_text())["upstream"]["baseline_scores"]   # the scores it read
    contrastive = cfg["adra"]["contrastive"]
    scores = pd.read_parquet(results / "scores" / model / dataset / key / "seed-0/scores.parquet")
    np.testing.assert_allclose(data["weight"], minmax_membership_weight(
        scores.set_index("id").loc[data["id"], contrastive["baseline"]].to_numpy()))
    assert all(len(r) == 1 + contrastive["distractors"] for r in data["references"])
    summary = pd.read_parquet(results / "evaluation" / dataset / "summary.parquet")
    methods = set(summary.loc[summary["model"] == model, "method"])
    assert {f"{m}/lcs_ratio_ref@bon" for m in (*cfg["adra"]["variants"], "n_sampling", "adra_init")} <= methods
    assert not summary["method"].str.contains("@step").any(), "intermediate policies stay in the report"
    rollouts = list((results / "adra/rollouts" / model / dataset / "seed-0").glob("*/*/rollouts.parquet"))
    assert len(rollouts) == 1 + len(cfg["adra"]["variants"]) * (len(steps) + 1)  # init, each step and the final
