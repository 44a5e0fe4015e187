"""benchmarks/process_census.py: every Python process a command starts, with its CPU seconds, by kind and test."""

from __future__ import annotations

import json
import subprocess
import sys

from workflow_helpers import REPO

CENSUS = REPO / "benchmarks" / "process_census.py"

#: a parent that burns a little CPU, imports torch, and starts a child named like a Snakemake job's script
PARENT = """
import subprocess, sys, time
from pathlib import Path
job = Path(sys.argv[1]) / ".snakemake" / "scripts" / "tmpab12cd.score_baselines.py"
job.parent.mkdir(parents=True)
job.write_text("import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3: pass\\n")
subprocess.run([sys.executable, str(job)], check=True)
import torch
"""


def test_run_records_every_python_process_and_report_groups_them(tmp_path, monkeypatch):
    out = tmp_path / "census.jsonl"
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_x.py::test_y (call)")
    proc = subprocess.run([sys.executable, str(CENSUS), "run", str(out), "--", sys.executable, "-c", PARENT,
                           str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    child, parent = records       # the child exits first; nothing else is recorded (not the census's own process)
    assert child["argv"][0].endswith(".score_baselines.py") and parent["argv"][0] == "-c", records
    assert child["ppid"] == parent["pid"] and child["cpu"] >= 0.3 and not child["torch"]
    assert parent["torch"] and not parent["model_code"] and parent["test"] == "tests/test_x.py::test_y (call)"
    text = subprocess.run([sys.executable, str(CENSUS), "report", str(out)], capture_output=True, text=True,
                          check=True).stdout
    assert text.startswith("2 processes,") and "| job score_baselines | 1 |" in text
    assert "| program -c | 1 |" in text and "| tests/test_x.py::test_y | 2 |" in text


def test_a_failing_command_gives_its_exit_status_and_no_command_is_an_error(tmp_path):
    assert subprocess.run([sys.executable, str(CENSUS), "run", str(tmp_path / "c.jsonl"), "--", sys.executable, "-c",
                           "raise SystemExit(3)"]).returncode == 3
    proc = subprocess.run([sys.executable, str(CENSUS), "run", str(tmp_path / "c.jsonl"), "--"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "a command to run is required" in proc.stderr
