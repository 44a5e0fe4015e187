"""benchmarks/suite_phases.py: the test command's phases and its tests by group, from what scripts/test.sh
records in .suite/."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
from workflow_helpers import REPO

spec = importlib.util.spec_from_file_location("suite_phases", REPO / "benchmarks" / "suite_phases.py")
suite_phases = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite_phases)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_tiny_world" name="test_partial_rerun_of_one_dataset_touches_no_other" time="600.0"/>
<testcase classname="tests.test_slurm" name="test_a_failed_run_is_accounted_too" time="200.0"/>
<testcase classname="tests.test_rehearsal" name="test_paper_config_rehearses_its_own_stages[x]" time="100.0"/>
<testcase classname="tests.test_generation" name="test_vllm_rollouts_through_worker_venv" time="60.0"/>
<testcase classname="tests.test_lm" name="test_a" time="30.0"/>
<testcase classname="tests.test_lm" name="test_b" time="10.0"/>
</testsuite></testsuites>"""


def test_the_tables_give_each_phase_and_group_its_share(tmp_path):
    (tmp_path / "phases.tsv").write_text("install\t100\t90\nvLLM environment\t20\t20\nsuite\t1000\t1500\n"
                                         "oldest versions\t80\t150\n")
    (tmp_path / "first.xml").write_text(JUNIT)
    assert subprocess.run([sys.executable, str(REPO / "benchmarks" / "suite_phases.py"), "--machine", str(tmp_path)],
                          check=True).returncode == 0
    machine = json.loads((tmp_path / "machine.json").read_text())
    assert set(machine) == {"cpu", "cores", "native_bf16", "load", "date"}
    text = suite_phases.tables(tmp_path, slowest=2)
    assert "| suite | 1000 | 83% | 1.5 |" in text and "| all | 1200 | 100% | 1.5 |" in text   # 1760 / 1200
    assert "| install | 100 | 8% | 0.9 |" in text
    assert "| suite world | 1 | 600 | 60% |" in text and "| SLURM | 1 | 200 | 20% |" in text
    assert "| vLLM | 1 | 60 | 6% |" in text and "| the rest | 2 | 40 | 4% |" in text
    assert text.index("| suite world |") < text.index("| SLURM |") < text.index("| rehearsals |")   # largest first
    slowest = text.split("slowest tests")[1]
    assert "test_partial_rerun_of_one_dataset_touches_no_other" in slowest and "test_b" not in slowest


def test_an_older_record_without_busy_core_seconds_still_reads(tmp_path):
    (tmp_path / "phases.tsv").write_text("install\t100\nsuite\t1000\n")
    text = suite_phases.tables(tmp_path)
    assert "| suite | 1000 | 91% | – |" in text and "| all | 1100 | 100% | – |" in text


def test_the_test_command_records_busy_core_seconds_per_phase(tmp_path):
    """scripts/test.sh's own ``busy``, ``begin`` and ``phase`` (run as the script defines them): a phase that keeps a
    core busy for two seconds records at least a busy core-second, and at most what the machine's cores had."""
    script = (REPO / "scripts" / "test.sh").read_text()
    defs = "\n".join(line for line in script.splitlines() if line.startswith(("busy()", "hz=", "begin()", "phase()")))
    assert defs.count("\n") == 3, defs
    spin = f"{sys.executable} -c 'import time; t = time.process_time()\nwhile time.process_time() - t < 2: pass'"
    subprocess.run(["bash", "-c", f"{defs}\nmkdir -p .suite\nbegin\n{spin}\nphase spin"], cwd=tmp_path, check=True)
    name, seconds, busy = (tmp_path / ".suite" / "phases.tsv").read_text().split()
    assert name == "spin" and 1 <= int(busy) <= 2 * max(int(seconds), 2) + 2, (seconds, busy)


def test_without_a_record_it_says_what_to_run(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "suite_phases.py"), str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "run bash scripts/test.sh first" in proc.stderr


def run_test_command(folder, vllm_rc: int, install_rc: int = 0) -> subprocess.CompletedProcess:
    """scripts/test.sh in ``folder`` with stubs for the install, the vLLM setup and the venv's python: each setup script
    writes when it started and ended (a second apart), says hello and exits with the given status; the python does
    nothing."""
    (folder / "scripts").mkdir(parents=True)
    (folder / "scripts" / "test.sh").write_text((REPO / "scripts" / "test.sh").read_text())
    for name, rc in (("install", install_rc), ("setup_vllm", vllm_rc)):
        (folder / "scripts" / f"{name}.sh").write_text(
            f"echo {name} start $(date +%s.%N) >> times\nsleep 1\necho {name} end $(date +%s.%N) >> times\n"
            f"echo {name} says hello\nexit {rc}\n")
    python = folder / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    return subprocess.run(["bash", "scripts/test.sh", "-q"], cwd=folder, capture_output=True, text=True, timeout=60)


def recorded_phases(folder) -> list[str]:
    """The phases the test command recorded in ``folder`` (read as benchmarks/suite_phases.py reads them)."""
    return [name for name, *_ in suite_phases.phases(folder / ".suite")] \
        if (folder / ".suite" / "phases.tsv").exists() else []


def test_the_vllm_environment_is_built_beside_the_install(tmp_path):
    """The two environments share nothing: the vLLM venv's setup starts before the install ends, and the test command
    goes on once both are done, its output shown and both phases recorded."""
    proc = run_test_command(tmp_path, vllm_rc=0)
    assert proc.returncode == 0, proc.stderr
    times = {(name, event): float(t) for name, event, t in
             (line.split() for line in (tmp_path / "times").read_text().splitlines())}
    assert times["setup_vllm", "start"] < times["install", "end"]
    assert "setup_vllm says hello" in proc.stdout
    assert recorded_phases(tmp_path) == ["install", "vLLM environment", "suite"]


def test_a_failed_environment_fails_the_test_command(tmp_path):
    """A vLLM setup that fails stops the test command before the suite, its log on stderr; so does a failed install."""
    proc = run_test_command(tmp_path / "vllm", vllm_rc=3)
    assert proc.returncode != 0 and "setup_vllm says hello" in proc.stderr
    assert recorded_phases(tmp_path / "vllm") == ["install"]
    proc = run_test_command(tmp_path / "install", vllm_rc=0, install_rc=4)
    assert proc.returncode != 0 and recorded_phases(tmp_path / "install") == []


def test_the_world_benchmark_refuses_bad_arguments_before_any_run(tmp_path):
    """benchmarks/tiny_world.sh: no revision, three, an unknown option, a name that is no commit, `--dir` without
    its folder or `--suite` at a revision without the suite's world exit 2 with the reason, and nothing is
    unpacked."""
    script = REPO / "benchmarks" / "tiny_world.sh"
    for args, reason in [((), "usage:"), (("HEAD", "HEAD", "HEAD"), "usage:"), (("--fast", "HEAD"), "unknown option"),
                         (("no-such-commit",), "not a commit: no-such-commit"),
                         (("HEAD", "--dir"), "--dir needs a folder")]:
        proc = subprocess.run(["bash", str(script), "--dir", str(tmp_path / "w"), *args], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and reason in proc.stderr, (args, proc.stderr)
    old = tmp_path / "old"                       # a repository whose one commit has the script, not the suite's world
    (old / "benchmarks").mkdir(parents=True)
    shutil.copy(script, old / "benchmarks")
    git = ["git", "-C", str(old), "-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "old"]):
        subprocess.run([*git, *cmd], check=True, capture_output=True)
    proc = subprocess.run(["bash", str(old / "benchmarks" / "tiny_world.sh"), "--dir", str(tmp_path / "w"), "--suite",
                           "HEAD"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no suite world at" in proc.stderr, proc.stderr
    assert not (tmp_path / "w").exists()


def test_the_avx2_wrapper_hides_the_bf16_flags_from_all_the_command_starts():
    """benchmarks/avx2.sh: the command and the processes it starts read a /proc/cpuinfo without AVX-512 and AMX, so
    `auto` resolves to float32 and torch runs at AVX2; its status is the command's; without a command, its usage."""
    script = REPO / "benchmarks" / "avx2.sh"
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("benchmarks/avx2.sh needs root and a private mount namespace (unshare -m)")
    child = ("import subprocess, torch; from mialab.lm.loading import resolve_dtype; "
             "print(resolve_dtype('auto', 'cpu'), torch.backends.cpu.get_cpu_capability(), subprocess.run("
             "['grep', '-c', 'avx512', '/proc/cpuinfo'], capture_output=True, text=True).stdout.strip())")
    proc = subprocess.run(["bash", str(script), sys.executable, "-c", child], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["float32", "AVX2", "0"]
    assert subprocess.run(["bash", str(script), "sh", "-c", "exit 7"], timeout=60).returncode == 7
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr
