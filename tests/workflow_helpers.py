"""Run the real workflow (Snakemake CLI, in a subprocess) in a scratch working directory."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


FOUNDATION_KEYS = ("seeds", "datasets", "tokenizer", "models", "scoring", "evaluation", "launch")


def foundation_config() -> dict:
    """The default config reduced to the foundation: its datasets, the base, control and sft
    models and the passive baselines (method sections left out), for DAG tests of the spine."""
    cfg = {k: v for k, v in default_config().items() if k in FOUNDATION_KEYS}
    cfg["datasets"] = {k: cfg["datasets"][k] for k in ("wikimia", "aime")}
    cfg["models"] = {k: cfg["models"][k] for k in ("base", "control", "sft")}
    return cfg


def make_workdir(path: Path, config: dict | None = None) -> Path:
    """A working directory with ``resources`` linked in and ``config.yaml`` written."""
    path.mkdir(parents=True, exist_ok=True)
    if not (path / "resources").exists():
        (path / "resources").symlink_to(REPO / "resources")
    write_config(path, config if config is not None else default_config())
    return path


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config.yaml").write_text(yaml.safe_dump(copy.deepcopy(config), sort_keys=False))


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``snakemake -s REPO/Snakefile -d workdir --configfile workdir/config.yaml ARGS``."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--configfile", str(workdir / "config.yaml"), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def planned_jobs(workdir: Path, *args: str) -> dict[str, int]:
    """Jobs a dry run would execute, per rule (the 'Job stats' table)."""
    proc = snakemake(workdir, "-n", *args)
    out = proc.stdout + proc.stderr
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:", 1)[1]
    jobs = {}
    for line in table.splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        if m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs
