"""Every Python process a command starts, with the CPU it used (not a test): where a suite's or a workflow's
CPU-seconds go when they are spread over hundreds of short processes (Snakemake's job scripts, its own
processes, SLURM's, the tests').

    python benchmarks/process_census.py run OUT.jsonl -- COMMAND ARGS...   # run COMMAND, record its processes
    python benchmarks/process_census.py report OUT.jsonl                    # the tables

``run`` puts a ``sitecustomize`` module first on ``PYTHONPATH`` (so every Python process that inherits the
environment loads it) that appends one JSON line to OUT.jsonl at the process's exit: its argv, wall seconds,
its own CPU seconds (user + system, not its children's), whether it imported torch, transformers' model
code (``transformers.modeling_utils``: the ~5 CPU-s import every model job pays before its first line of
work) and Snakemake's workflow, and the test that started it (``PYTEST_CURRENT_TEST``; a SLURM job's is the
test that started the SLURM daemons, whose environment it inherits). Not recorded: a
process killed by a signal or ended by ``os._exit``, one started with an environment of its own that drops
``PYTHONPATH`` (scripts/test.sh's second pass sets its own), and non-Python processes (SLURM's daemons, the
compilers).

``report`` groups the records by kind (a Snakemake job's rule, from its script's name; a Snakemake
process; anything else by its program) and by test, each with its processes, CPU seconds and how many
imported the model code, then the totals.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: the module ``run`` installs as ``sitecustomize``: appends the process's record to $MIALAB_CENSUS at exit
HOOK = '''
import atexit, json, os, resource, sys, time

_start = time.time()


def _record():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    mods = sys.modules
    rec = {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:8], "wall": round(time.time() - _start, 3),
           "cpu": round(usage.ru_utime + usage.ru_stime, 3), "torch": "torch" in mods,
           "model_code": "transformers.modeling_utils" in mods, "snakemake": "snakemake.workflow" in mods,
           "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
    with open(os.environ["MIALAB_CENSUS"], "a") as out:
        out.write(json.dumps(rec) + "\\n")


if os.environ.get("MIALAB_CENSUS"):
    atexit.register(_record)
'''

SCRIPT = re.compile(r"(?:\.snakemake/scripts/tmp\w+\.|workflow_scripts/)(\w+)\.py")


def kind(argv: list[str]) -> str:
    """``job <rule>`` for a Snakemake job's script (or a workflow script a job launched), ``snakemake``, else the
    program (``-c`` for inline code, pytest-xdist's workers among them)."""
    line = " ".join(argv)
    if found := SCRIPT.search(line):
        return f"job {found.group(1)}"
    if "snakemake" in line:
        return "snakemake"
    return f"program {Path(argv[0]).name if argv else '?'}"


def run(out: Path, command: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="census-") as hook_dir:
        Path(hook_dir, "sitecustomize.py").write_text(HOOK)
        path = os.pathsep.join(filter(None, [hook_dir, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "MIALAB_CENSUS": str(out.resolve())}
        return subprocess.run(command, env=env).returncode


def table(records: list[dict], key, title: str, top: int) -> str:
    rows = collections.defaultdict(lambda: [0, 0.0, 0])
    for r in records:
        row = rows[key(r)]
        row[0] += 1
        row[1] += r["cpu"]
        row[2] += r["model_code"]
    lines = [f"| {title} | processes | CPU s | of them importing the model code |", "|---|---:|---:|---:|"]
    for name, (n, cpu, model) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| {name} | {n} | {cpu:.0f} | {model} |")
    return "\n".join(lines)


def report(records: list[dict], top: int = 25) -> str:
    test = lambda r: re.sub(r" \((setup|call|teardown)\)$", "", r["test"]) or "(no test)"  # noqa: E731
    total = sum(r["cpu"] for r in records)
    model = [r for r in records if r["model_code"]]
    return "\n\n".join([
        f"{len(records)} processes, {total:.0f} CPU-s; {len(model)} imported the model code "
        f"({sum(r['cpu'] for r in model):.0f} CPU-s in all)",
        table(records, lambda r: kind(r["argv"]), "kind", top),
        table(records, test, "test", top)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="run COMMAND, recording every Python process it starts")
    r.add_argument("out", type=Path)
    r.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("report", help="the tables of a census")
    p.add_argument("census", type=Path)
    p.add_argument("--top", type=int, default=25)
    ns = ap.parse_args()
    if ns.what == "run":
        command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
        if not command:
            ap.error("run: a command to run is required (after --)")
        sys.exit(run(ns.out, command))
    records = [json.loads(line) for line in ns.census.read_text().splitlines() if line.strip()]
    print(report(records, ns.top))


if __name__ == "__main__":
    main()
