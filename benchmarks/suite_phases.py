"""Where the test command's time goes (not a test): its phases and its tests by group, from what
``scripts/test.sh`` records in ``.suite/`` on every run (``phases.tsv``: phase, seconds and the core-seconds the
machine was busy meanwhile, from ``/proc/stat``; the junit files of
its two pytest passes; ``machine.json``: the CPU, native bf16 or not, the load when it started).

    python benchmarks/suite_phases.py [.suite]            # the tables
    python benchmarks/suite_phases.py --machine [.suite]  # record the machine (scripts/test.sh does)

Each phase as seconds, its share of the whole and the cores it kept busy on average (near the machine's
cores: CPU-bound, only less work makes it faster; well below: it waits, on a SLURM status check or on one
slow test while the other worker is done, and better scheduling would help); each group of the first pass's tests (the suite world's,
the SLURM tests, the paper-config rehearsals, vLLM's, the rest) as the test-seconds it holds (setup, call and
teardown: a session fixture counts once, in the test that first asked for it) and its share of the pass's
test-seconds (two workers share the cores, so test-seconds are about twice the pass's wall time); then the
slowest tests. A change that slows the suite shows as a share that grew; compare two runs' tables, not
single timings.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

#: test groups, first match wins: (name, substrings of the test's junit id, ``tests.<module>::<name>``)
GROUPS = (
    ("suite world", ("suite_world", "test_tiny_world")),   # the suite's world and the README world's tests
    ("SLURM", ("test_slurm",)),
    ("rehearsals", ("test_rehearsal",)),
    ("vLLM", ("vllm",)),
    ("exposure sweep", ("test_sweep",)),
)
OTHER = "the rest"


def group(test_id: str) -> str:
    return next((name for name, keys in GROUPS if any(k in test_id for k in keys)), OTHER)


def junit_tests(path: Path) -> list[tuple[str, float]]:
    """(test id, seconds) of every test case of a junit file."""
    root = ET.parse(path).getroot()
    return [(f"{case.get('classname', '')}::{case.get('name', '')}", float(case.get("time") or 0.0))
            for case in root.iter("testcase")]


def phases(folder: Path) -> list[tuple[str, float, float | None]]:
    """(phase, seconds, busy core-seconds or None where the record has no third column)."""
    rows = [line.split("\t") for line in (folder / "phases.tsv").read_text().splitlines() if line.strip()]
    return [(row[0], float(row[1]), float(row[2]) if len(row) > 2 else None) for row in rows]


def tables(folder: Path, slowest: int = 10) -> str:
    """The report: machine, phases, the first pass's groups and its slowest tests."""
    out = []
    machine = folder / "machine.json"
    if machine.is_file():
        m = json.loads(machine.read_text())
        out += [f"machine: {m['cpu']}, {m['cores']} cores, native bf16: {m['native_bf16']}, "
                f"load at start: {m['load']}, {m['date']}", ""]
    steps = phases(folder)
    total = sum(s for _, s, _ in steps) or 1.0
    cores = lambda s, b: "–" if b is None or s <= 0 else f"{b / s:.1f}"
    busy = None if any(b is None for *_, b in steps) else sum(b for *_, b in steps)
    out += ["| phase | seconds | share | cores busy |", "|---|---:|---:|---:|"]
    out += [f"| {name} | {s:.0f} | {100 * s / total:.0f}% | {cores(s, b)} |" for name, s, b in steps]
    out += [f"| all | {total:.0f} | 100% | {cores(total, busy)} |", ""]
    first = folder / "first.xml"
    if first.is_file():
        tests = junit_tests(first)
        held = sum(s for _, s in tests) or 1.0
        by_group: dict[str, list[float]] = {}
        for test_id, s in tests:
            by_group.setdefault(group(test_id), []).append(s)
        out += ["| group (first pass) | tests | test-seconds | share |", "|---|---:|---:|---:|"]
        out += [f"| {name} | {len(v)} | {sum(v):.0f} | {100 * sum(v) / held:.0f}% |"
                for name, v in sorted(by_group.items(), key=lambda kv: -sum(kv[1]))]
        out += ["", "| slowest tests (first pass) | seconds |", "|---|---:|"]
        out += [f"| `{test_id}` | {s:.0f} |" for test_id, s in sorted(tests, key=lambda t: -t[1])[:slowest]]
    return "\n".join(out) + "\n"


def record_machine(folder: Path) -> None:
    """``machine.json``: the CPU's model name, cores, native bf16 (AMX / AVX512-BF16: ``auto`` computes in bf16),
    the 1-minute load and the date."""
    import datetime
    import os

    from mialab.lm.loading import cpu_has_native_bf16

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "machine.json").write_text(json.dumps({
        "cpu": model, "cores": os.cpu_count(), "native_bf16": cpu_has_native_bf16(),
        "load": round(os.getloadavg()[0], 2), "date": datetime.date.today().isoformat()}) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=".suite", help="what scripts/test.sh recorded (default: .suite)")
    ap.add_argument("--machine", action="store_true", help="record this machine into the folder, print nothing")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    if args.machine:
        record_machine(folder)
        return 0
    if not (folder / "phases.tsv").is_file():
        print(f"{folder / 'phases.tsv'}: no record of a test run; run bash scripts/test.sh first", file=sys.stderr)
        return 1
    sys.stdout.write(tables(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
