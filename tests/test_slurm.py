"""The SLURM profile and job accounting against a real single-node SLURM (tests/slurm/boot.sh).

The fixture workflow (tests/slurm/fixture) runs through `snakemake --profile profiles/slurm`
exactly as documented in docs/slurm.md, with boot.sh's exports fitting the profile to this node.
If SLURM cannot boot, the tests fail with the reason; they are skipped only when the Debian
packages cannot be installed and CI is not set.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import boot_slurm

from mialab.pipeline import accounting

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BOOT = REPO / "tests" / "slurm" / "boot.sh"
STOP = REPO / "tests" / "slurm" / "stop.sh"
FIXTURE = REPO / "tests" / "slurm" / "fixture" / "Snakefile"
VENV_BIN = Path(sys.executable).parent


def snakemake(workdir: Path, env: dict[str, str], *args: str, ok: bool = True) -> tuple[str, float]:
    """`snakemake --profile profiles/slurm` on the fixture from the repo root; returns (log, seconds).
    ``ok``: the run must succeed (else: must fail)."""
    cmd = [
        str(VENV_BIN / "snakemake"), "--profile", "profiles/slurm",
        "--snakefile", str(FIXTURE), "--directory", str(workdir),
        "--slurm-init-seconds-before-status-checks", "2", *args,
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    assert (proc.returncode == 0) == ok, f"snakemake: rc {proc.returncode}:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout + proc.stderr, seconds


def run_id(log: str) -> str:
    return re.search(r"SLURM run ID: (\S+)", log).group(1)


def submitted(log: str) -> list[str]:
    """SLURM job ids the run submitted, from Snakemake's log."""
    return re.findall(r"has been submitted with SLURM jobid (\d+)", log)


def account(workdir: Path, env: dict[str, str], *config_files: str) -> pd.DataFrame:
    """Run the accounting rule (forced: it has no inputs here) of the experiment of ``config_files`` (none: the
    fixture's own, ``config``) and read its per-job table."""
    configs = ["--configfile", *config_files] if config_files else []
    snakemake(workdir, env, "--forcerun", "accounting", *configs, "--", "accounting")
    experiment = "-".join(Path(f).stem for f in config_files) or "config"
    return pd.read_parquet(workdir / "results" / "accounting" / experiment / "jobs.parquet")


@pytest.fixture(scope="module")
def first_run(slurm_env: dict[str, str]) -> dict:
    """The whole fixture workflow, then the accounting rule, in a fresh working directory.

    Not under pytest's tmp_path: concurrent pytest sessions of the same user prune those.
    """
    workdir = Path(tempfile.mkdtemp(prefix="mialab-slurm-fixture-"))
    log, seconds = snakemake(workdir, slurm_env)
    start = time.monotonic()
    jobs = account(workdir, slurm_env)
    print(f"fixture workflow: {seconds:.1f}s, accounting rule: {time.monotonic() - start:.1f}s")
    yield {"workdir": workdir, "log": log, "run_id": run_id(log), "jobs": jobs, "env": slurm_env}
    shutil.rmtree(workdir)


def test_boot_is_idempotent_and_loopback_only(slurm_env: dict[str, str]) -> None:
    state = Path(slurm_env["SLURM_CONF"]).parents[1]
    pids = {p.name: p.read_text() for p in (state / "pids").iterdir()}
    proc, seconds = boot_slurm()
    assert proc.returncode == 0 and proc.stdout.startswith("# mialab-slurm: already up")
    assert seconds < 10
    assert {p.name: p.read_text() for p in (state / "pids").iterdir()} == pids
    conf = dict(
        line.split("=", 1) for line in Path(slurm_env["SLURM_CONF"]).read_text().splitlines() if "=" in line
    )
    ports = {int(conf[k]) for k in ("SlurmctldPort", "SlurmdPort", "AccountingStoragePort")}
    listening = {}  # port -> local addresses in state LISTEN (0A), from /proc/net/tcp{,6}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state_hex = row.split()[1], row.split()[3]
            addr, port = local.split(":")
            if state_hex == "0A" and int(port, 16) in ports:
                listening.setdefault(int(port, 16), set()).add(addr)
    assert listening == {p: {"0100007F"} for p in ports}  # 127.0.0.1 only


def test_fixture_workflow_completes_through_profile(first_run: dict) -> None:
    workdir = first_run["workdir"]
    for dataset in ("alpha", "beta"):
        text = (workdir / "results" / dataset / "tiny" / "seed1" / "model.txt").read_text()
        assert text.strip() == "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"  # the 8 fake H200s, set by SLURM
    assert (workdir / "results" / "alpha" / "flaky.txt").read_text().strip() == "mem_mb=8000"


def test_gpu_rule_is_scheduled_with_eight_gpus(first_run: dict) -> None:
    jobs = first_run["jobs"]
    gpu_ids = set(jobs.loc[jobs["rule"] == "pretrain_model", "job_id"])
    assert len(gpu_ids) == 2
    tres = accounting.SACCT_FIELDS.index("AllocTRES")
    rows = [line.split(accounting.DELIMITER) for line in accounting.run_sacct("now-1hours").splitlines()]
    allocated = [fields[tres] for fields in rows if fields[0] in gpu_ids]
    assert len(allocated) == 2 and all("gres/gpu=8" in t.split(",") for t in allocated)
    assert set(jobs.loc[jobs["rule"] != "pretrain_model", "alloc_gpus"]) == {0}


def test_accounting_lists_every_job(first_run: dict) -> None:
    jobs = first_run["jobs"]
    assert sorted(jobs["job_id"], key=int) == sorted(submitted(first_run["log"]), key=int)
    assert set(jobs["run_id"]) == {first_run["run_id"]}
    assert (jobs["elapsed_s"] > 0).all() and (jobs["max_rss_mb"] > 0).all()
    keys = set(zip(jobs["rule"], jobs["wildcards"], jobs["dataset"], jobs["model"].fillna("-")))
    assert keys == {
        ("make_data", "alpha", "alpha", "-"),
        ("make_data", "beta", "beta", "-"),
        ("pretrain_model", "alpha_tiny_1", "alpha", "tiny"),
        ("pretrain_model", "beta_tiny_1", "beta", "tiny"),
        ("flaky", "alpha", "alpha", "-"),
    }
    stages = pd.read_parquet(first_run["workdir"] / "results" / "accounting" / "config" / "stages.parquet").set_index("rule")
    gpu = jobs[jobs["rule"] == "pretrain_model"]
    assert stages.loc["pretrain_model", "gpu_hours"] == pytest.approx((gpu["elapsed_s"] * 8).sum() / 3600)
    assert "## Per dataset" in (first_run["workdir"] / "results" / "accounting" / "config" / "jobs.md").read_text()


def test_accounting_shows_how_well_the_jobs_used_what_they_got(first_run: dict) -> None:
    """The efficiency columns from sacct: CPU (TotalCPU), memory (MaxRSS / ReqMem), queue wait; GPU
    utilisation is blank (this SLURM does not track gres/gpuutil), and the cluster tracks gres/gpu, so no
    tracking warning; the report's efficiency warnings are exactly the stages below the default thresholds."""
    jobs, out = first_run["jobs"], first_run["workdir"] / "results" / "accounting" / "config"
    done = jobs[jobs["state"] == "COMPLETED"]
    assert done["cpu_efficiency"].between(0, 1.5).all() and (done["cpu_efficiency"] > 0).any()
    assert (done["mem_efficiency"] > 0).all() and (done["req_mem_mb"] == done["alloc_mem_mb"]).all()
    assert (jobs["queue_s"] >= 0).all() and jobs["gpu_util_pct"].isna().all()
    md = (out / "jobs.md").read_text()
    assert "## Per model" in md and "does not track gres/gpu" not in md
    stages = pd.read_parquet(out / "stages.parquet")
    thresholds = {"cpu": 0.25, "memory": 0.1, "gpu": 0.3, "time": 0.1}   # the schema's defaults
    assert md.count("**Warning:**") == len(accounting.efficiency_warnings(stages, thresholds))
    for warning in accounting.efficiency_warnings(stages, thresholds):
        assert f"**Warning:** {warning}" in md
    assert (out / "gpu_hours.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    models = pd.read_parquet(out / "models.parquet").set_index("model")
    assert models.loc["tiny", "gpu_hours"] == pytest.approx(jobs.loc[jobs["rule"] == "pretrain_model", "gpu_hours"].sum())


def test_a_failed_run_is_accounted_too(first_run: dict) -> None:
    """The onerror hook writes the accounting of a run that failed, its failed job included."""
    workdir = first_run["workdir"]
    log, _ = snakemake(workdir, first_run["env"], "--retries", "0", "--", "broken", ok=False)
    assert "job accounting of the failed run" in log
    jobs = pd.read_parquet(workdir / "results" / "accounting" / "config" / "jobs.parquet")
    broken = jobs[jobs["rule"] == "broken"]
    assert list(broken["state"]) == ["FAILED"] and list(broken["job_id"]) == submitted(log)


def test_failed_first_attempt_is_retried_with_more_memory(first_run: dict) -> None:
    flaky = first_run["jobs"].query("rule == 'flaky'").sort_values("attempt")
    assert list(zip(flaky["attempt"], flaky["state"], flaky["alloc_mem_mb"])) == [
        (1, "FAILED", 4000.0),
        (2, "COMPLETED", 8000.0),
    ]


def test_partial_rerun_submits_only_that_datasets_jobs(first_run: dict) -> None:
    workdir = first_run["workdir"]
    shutil.rmtree(workdir / "results" / "beta")  # redo one dataset
    log, seconds = snakemake(workdir, first_run["env"])
    print(f"partial rerun: {seconds:.1f}s")
    jobs = account(workdir, first_run["env"])
    rerun = jobs[jobs["run_id"] == run_id(log)]
    assert sorted(rerun["job_id"], key=int) == sorted(submitted(log), key=int)
    assert sorted(zip(rerun["rule"], rerun["dataset"])) == [("make_data", "beta"), ("pretrain_model", "beta")]
    assert len(jobs[jobs["rule"] != "broken"]) == len(first_run["jobs"]) + 2  # the first run's jobs are still accounted


def test_two_experiments_from_one_checkout_are_accounted_apart(first_run: dict) -> None:
    """Two config files run from the first run's checkout (the fixture's datasets gamma, then delta): each run's
    jobs carry its experiment's job-name prefix (mialab-a_<uuid>, mialab-b_<uuid>), and each experiment's
    accounting (its end-of-run hook, then a refresh by hand) lists its own jobs only, the first run's neither."""
    workdir, env = first_run["workdir"], first_run["env"]
    logs = {}
    for name, dataset in (("a", "gamma"), ("b", "delta")):
        (workdir / f"{name}.yaml").write_text(f"fixture_datasets: [{dataset}]\n")
        logs[name], _ = snakemake(workdir, env, "--configfile", str(workdir / f"{name}.yaml"))
        assert run_id(logs[name]).startswith(f"mialab-{name}_")
    for name, dataset in (("a", "gamma"), ("b", "delta")):
        hooked = pd.read_parquet(workdir / "results" / "accounting" / name / "jobs.parquet")
        jobs = account(workdir, env, str(workdir / f"{name}.yaml"))
        for table in (hooked, jobs):
            assert sorted(table["job_id"], key=int) == sorted(submitted(logs[name]), key=int)
            assert set(table["run_id"]) == {run_id(logs[name])}
            assert sorted(zip(table["rule"], table["dataset"])) == [("make_data", dataset), ("pretrain_model", dataset)]
        assert "## Per run" in (workdir / "results" / "accounting" / name / "jobs.md").read_text()
    mine = account(workdir, env)   # the fixture's own experiment: the first run's jobs, not a's or b's
    assert not set(mine["job_id"]) & (set(submitted(logs["a"])) | set(submitted(logs["b"])))
    assert mine["run_id"].str.startswith("mialab-config_").all()
