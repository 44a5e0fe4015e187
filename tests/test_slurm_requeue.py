"""A generation job requeued on the test SLURM resumes (issue #22): the script of rule n_sampling_rollouts
(tests/test_generation_kill.py's job) submitted with `sbatch --requeue` and requeued (`scontrol requeue`) once a
part is on disk runs again from its parts (its log says which) and writes the bytes of the job run uninterrupted."""

from __future__ import annotations

import re
import shlex
import subprocess
import time

import pytest
from test_generation_kill import (  # noqa: F401 (TINY_MODEL: conftest.tiny_model; start: the fixture)
    PARTS,
    TINY_MODEL,
    harness_command,
    manifest_but_seconds,
    part_starts,
    reused_parts,
    start,
    wait_for_a_part,
    write_job,
)
from workflow_helpers import requeue, slurm_state

from mialab.lm.engine import parts_folder
from mialab.pipeline.accounting import parse_sacct, sacct_command

pytestmark = pytest.mark.slow


def sacct_runs(job: str, env: dict, since: str, timeout: float) -> list[str]:
    """The states sacct gives each run of ``job`` (``--duplicates``: a requeued job once per run), once its last
    run is accounted as ended (or ``timeout`` seconds have passed)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = parse_sacct(subprocess.run(sacct_command(since), env=env, capture_output=True, text=True,
                                          check=True).stdout)
        states = jobs.loc[jobs["job_id"] == job, "state"].tolist()
        if (states and states[-1] not in ("PENDING", "RUNNING", "REQUEUED")) or time.monotonic() > deadline:
            return states
        time.sleep(1)


def test_a_requeued_rollout_job_resumes_from_its_parts_to_the_uninterrupted_bytes(slurm_env, tiny_model, tmp_path,
                                                                                   start):  # noqa: F811
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    whole, requeued = write_job(tiny_model, tmp_path / "whole"), write_job(tiny_model, tmp_path / "requeued")
    uninterrupted = start(whole)
    work = requeued.parent
    job = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "-J", "mialab-requeue-test", "-A", slurm_env["MIALAB_SLURM_ACCOUNT"],
         "-p", slurm_env["MIALAB_SLURM_PARTITION"], "--cpus-per-task=1", "--mem=2000", "-D", str(work),
         "-o", str(work / "slurm-%j.out"), "--wrap", shlex.join(harness_command(requeued))],
        env=slurm_env, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    try:
        rollouts = work / "seed_0" / "rollouts.parquet"
        parts = parts_folder(rollouts)
        wait_for_a_part(parts, lambda: slurm_state(job, slurm_env) in ("PENDING", "CONFIGURING", "RUNNING"),
                        timeout=300)
        requeue(job, slurm_env)
        kept = part_starts(parts)   # the first run's (the second starts torch before it reads them)
        assert 1 <= len(kept) < PARTS and not rollouts.exists(), kept
        runs = sacct_runs(job, slurm_env, since, timeout=600)
    finally:
        if slurm_state(job, slurm_env):
            subprocess.run(["scancel", job], env=slurm_env)
    log = (work / "job.log").read_text()
    batch = "".join(p.read_text() for p in work.glob("slurm-*.out"))  # what a run printed before its log
    assert runs == ["REQUEUED", "COMPLETED"], (log[-3000:], batch[-2000:])
    shown = subprocess.run(["scontrol", "-o", "show", "job", job], env=slurm_env, capture_output=True,
                           text=True).stdout
    assert re.search(r"\bRestarts=1\b", shown), shown
    assert reused_parts(log) == kept   # the first run generated its parts, the second reused them
    assert uninterrupted.wait(timeout=300) == 0, (whole.parent / "job.log").read_text()[-3000:]
    assert rollouts.read_bytes() == (whole.parent / "seed_0" / "rollouts.parquet").read_bytes()
    assert not parts.exists()
    assert manifest_but_seconds(whole) == manifest_but_seconds(requeued)
