"""A generation job killed by SIGKILL resumes (issue #22, item 4): the script of rule n_sampling_rollouts, run
in a process group of its own, is killed once a part is on disk; its rerun reuses the parts it finds (its log
says which) and writes the bytes of the same job run uninterrupted. The harness and helpers here run any
workflow script as a job (tests/test_lara_baselines_resume.py, tests/test_slurm_requeue.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from workflow_helpers import NS_TASK, schema_defaults

from mialab.core.io import write_parquet
from mialab.lm.engine import parts_folder
from mialab.lm.hf_backend import PART_CANDIDATES

REPO = Path(__file__).resolve().parents[1]
WORDS = "the quick brown fox jumps over a lazy dog while once upon a time there was a tiny model".split()
PARTS = 4  # of the hf backend's part size, so that a kill after the first leaves three to do
N = PARTS * PART_CANDIDATES
SPLIT = pd.DataFrame({
    "id": [f"c{i}" for i in range(N)],
    "prefix": [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(3 + i % 4)) for i in range(N)],
    "suffix": [" ".join(WORDS[(3 * i + k) % len(WORDS)] for k in range(4)) for i in range(N)],
    "label": [i % 2 for i in range(N)],
})
TINY_MODEL = {"corpus": [" ".join(WORDS)] * 50, "min_frequency": 1, "hidden_size": 32, "num_layers": 1}
CONFIG = {"task": {**schema_defaults(*NS_TASK), "template": "continuation", "max_new_tokens": 16},
          "prompt_format": "plain", "backend": "hf", "backend_options": {"batch_size": 256, "device": "cpu"}}
SAMPLING = {"n": 4, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": 0}

#: Runs the workflow script of the job read from argv[1] (JSON: :func:`script_job`) as Snakemake would.
HARNESS = """
import json, runpy, sys
from types import SimpleNamespace

class Named(list):
    def __init__(self, named):
        super().__init__(v for value in named.values() for v in (value if isinstance(value, list) else [value]))
        self.__dict__.update(named)

job = json.load(open(sys.argv[1]))
snakemake = SimpleNamespace(**{k: Named(job[k]) for k in ("input", "output", "params", "wildcards")},
                            log=[job["log"]], threads=1, config=job["config"])
runpy.run_path(job["script"], init_globals={"snakemake": snakemake}, run_name="__main__")
"""


def script_job(work: Path, script: str, **job) -> Path:
    """``work/job.json``: a job of ``workflow_scripts/<script>`` (its ``input``, ``output``, ``params``,
    ``wildcards`` as name -> value, ``config`` and ``log``) for :data:`HARNESS`; returns the file."""
    (work / "job.json").write_text(json.dumps({"script": str(REPO / "workflow_scripts" / script), **job}))
    return work / "job.json"


def harness_command(job: Path) -> list[str]:
    """The command that runs ``job`` (:func:`script_job`) in this interpreter."""
    return [sys.executable, "-c", HARNESS, str(job)]


def write_job(model: str, work: Path) -> Path:
    """A rollout job of :data:`SPLIT` in ``work`` (its outputs there too); returns its JSON file."""
    work.mkdir()
    split = work / "split.parquet"
    write_parquet(SPLIT, split)
    return script_job(work, "n_sampling_rollouts.py", input={"splits": [str(split)]},
                      output={"rollouts": [str(work / "seed_0" / "rollouts.parquet")],
                              "manifest": str(work / "manifest.json")},
                      params={"model_path": model, "samplings": [SAMPLING], "manifest": {"config": CONFIG}},
                      wildcards={"model": "base"}, config={"models": {"base": {"trust_remote_code": False}}},
                      log=str(work / "job.log"))


@pytest.fixture
def start():
    """``start(job) -> process``: the job run in a session (process group) of its own; any still running at
    the end of the test is killed."""
    procs = []

    def run(job: Path) -> subprocess.Popen:
        procs.append(subprocess.Popen(harness_command(job), cwd=job.parent, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                      start_new_session=True))
        return procs[-1]

    yield run
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def part_starts(folder: Path) -> list[int]:
    """The first item of each part on disk in a parts folder, sorted."""
    return sorted(int(p.stem.rsplit("-", 1)[1]) for p in folder.glob("*.parquet"))


def reused_parts(log: str) -> list[int]:
    """The first item of each part a job's log says it reused, in order."""
    return [int(m.group(1)) for m in re.finditer(r"reusing part (\d+)-\d+ of", log)]


def wait_for_a_part(folder: Path, running, timeout: float = 120) -> None:
    """Return once a part is on disk in ``folder``; fail when the job stops first (``running()`` false)."""
    deadline = time.monotonic() + timeout
    while not part_starts(folder) and running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running() and part_starts(folder), "the job ended (or timed out) before a part was on disk"


def sigkill_after_a_part(proc: subprocess.Popen, parts: Path) -> list[int]:
    """SIGKILL a job's process group once a part is in ``parts``; the first items of the parts it left."""
    wait_for_a_part(parts, lambda: proc.poll() is None)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    return part_starts(parts)


def manifest_but_seconds(job: Path) -> dict:
    """The manifest a job (:func:`script_job`) wrote, without its wall time."""
    return {k: v for k, v in json.loads(Path(json.loads(job.read_text())["output"]["manifest"]).read_text()).items()
            if k != "seconds"}


@pytest.mark.slow  # three processes that each start torch
def test_sigkilled_rollout_job_resumes_from_its_parts_to_the_uninterrupted_bytes(tiny_model, tmp_path, start):
    whole, killed = write_job(tiny_model, tmp_path / "whole"), write_job(tiny_model, tmp_path / "killed")
    uninterrupted, proc = start(whole), start(killed)
    rollouts = killed.parent / "seed_0" / "rollouts.parquet"
    parts = parts_folder(rollouts)
    kept = sigkill_after_a_part(proc, parts)
    assert 1 <= len(kept) < PARTS and not rollouts.exists(), kept

    stale = rollouts.parent / ".rollouts.parquet.k1ll3d.tmp"  # what a kill during the final write leaves
    stale.write_bytes(b"half a parquet")
    log = killed.parent / "job.log"
    log.write_text("")
    assert start(killed).wait(timeout=300) == 0, log.read_text()[-3000:]
    assert reused_parts(log.read_text()) == kept
    assert uninterrupted.wait(timeout=300) == 0, (whole.parent / "job.log").read_text()[-3000:]
    assert rollouts.read_bytes() == (whole.parent / "seed_0" / "rollouts.parquet").read_bytes()
    assert not parts.exists() and not stale.exists()
    assert manifest_but_seconds(whole) == manifest_but_seconds(killed)
