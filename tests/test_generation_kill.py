"""A generation job killed by SIGKILL resumes (issue #22, item 4): the script of rule n_sampling_rollouts, run
in a process group of its own, is killed once a part is on disk; its rerun reuses the parts it finds (its log
says which) and writes the bytes of the same job run uninterrupted."""

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
CONFIG = {"task": {"template": "continuation", "max_new_tokens": 16}, "chat": False, "backend": "hf",
          "backend_options": {"batch_size": 256, "device": "cpu"}}
SAMPLING = {"n": 4, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": 0}

#: Runs workflow_scripts/n_sampling_rollouts.py as Snakemake would, with the job read from argv[1] (JSON).
HARNESS = """
import json, runpy, sys

class Named(list):
    def __init__(self, items=(), **named):
        super().__init__(items)
        self.__dict__.update(named)

job = json.load(open(sys.argv[1]))
snakemake = Named(
    input=Named(job["splits"], splits=job["splits"]), output=Named([*job["rollouts"], job["manifest_file"]],
    rollouts=job["rollouts"], manifest=job["manifest_file"]), params=Named(model_path=job["model"],
    samplings=[job["sampling"]], manifest={"config": job["config"]}), log=[job["log"]], threads=1,
    config={"models": {"base": {"trust_remote_code": False}}}, wildcards=Named(model="base"))
runpy.run_path(sys.argv[2], init_globals={"snakemake": snakemake}, run_name="__main__")
"""


def write_job(model: str, work: Path) -> Path:
    """A rollout job of :data:`SPLIT` in ``work`` (its outputs there too); returns its JSON file."""
    work.mkdir()
    split = work / "split.parquet"
    write_parquet(SPLIT, split)
    job = {"splits": [str(split)], "rollouts": [str(work / "seed_0" / "rollouts.parquet")],
           "manifest_file": str(work / "manifest.json"), "model": model, "sampling": SAMPLING, "config": CONFIG,
           "log": str(work / "job.log")}
    (work / "job.json").write_text(json.dumps(job))
    return work / "job.json"


@pytest.fixture
def start():
    """``start(job) -> process``: the job run in a session (process group) of its own; any still running at
    the end of the test is killed."""
    procs = []

    def run(job: Path) -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, "-c", HARNESS, str(job),
                                       str(REPO / "workflow_scripts" / "n_sampling_rollouts.py")],
                                      cwd=job.parent, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                      start_new_session=True))
        return procs[-1]

    yield run
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow  # three processes that each start torch
def test_sigkilled_rollout_job_resumes_from_its_parts_to_the_uninterrupted_bytes(tiny_model, tmp_path, start):
    whole, killed = write_job(tiny_model, tmp_path / "whole"), write_job(tiny_model, tmp_path / "killed")
    uninterrupted, proc = start(whole), start(killed)
    rollouts = killed.parent / "seed_0" / "rollouts.parquet"
    parts = parts_folder(rollouts)
    deadline = time.monotonic() + 120
    while not list(parts.glob("*.parquet")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, f"the job ended (rc {proc.returncode}) before it could be killed with a part on disk"
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    kept = sorted(int(p.stem.rsplit("-", 1)[1]) for p in parts.glob("*.parquet"))  # each part's first candidate
    assert 1 <= len(kept) < PARTS and not rollouts.exists(), kept

    stale = rollouts.parent / ".rollouts.parquet.k1ll3d.tmp"  # what a kill during the final write leaves
    stale.write_bytes(b"half a parquet")
    log = killed.parent / "job.log"
    log.write_text("")
    assert start(killed).wait(timeout=300) == 0, log.read_text()[-3000:]
    assert [int(m.group(1)) for m in re.finditer(r"reusing part (\d+)-\d+ of", log.read_text())] == kept
    assert uninterrupted.wait(timeout=300) == 0, (whole.parent / "job.log").read_text()[-3000:]
    assert rollouts.read_bytes() == (whole.parent / "seed_0" / "rollouts.parquet").read_bytes()
    assert not parts.exists() and not stale.exists()
    manifests = [{k: v for k, v in json.loads((job.parent / "manifest.json").read_text()).items() if k != "seconds"}
                 for job in (whole, killed)]
    assert manifests[0] == manifests[1]
