#!/usr/bin/env bash
# The README's tiny world from a fresh folder, timed: each REV (a commit of this repository) is unpacked by
# `git archive` into DIR/<rev> and runs `snakemake --profile profiles/local` with this checkout's .venv, one
# revision after the other (run it alone on the machine). Prints each run's wall and CPU seconds (user +
# system, every process), its job-seconds by rule (results/benchmarks/), and with two revisions the second's
# over the first's.
#   bash benchmarks/tiny_world.sh [--avx2] [--suite] [--dir DIR] REV [REV2]
# --suite: the test suite's world instead (suite_world_config in that revision's tests/workflow_helpers.py, written
# over its config.yaml), so that a change to the suite's world shows in the same tables.
# --avx2: the CPU kind without AVX-512 and AMX simulated on a CPU with them (benchmarks/avx2.sh, root): the jobs
# read a /proc/cpuinfo without those flags, so `auto` resolves to fp32 as on that kind, and torch, oneDNN and MKL
# are held to AVX2. The clock speed and caches stay this machine's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${MIALAB_PYTHON:-$here/.venv/bin/python}"
avx2=0
suite=0
dir="${TMPDIR:-/tmp}/mialab-tiny-world"
revs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --avx2) avx2=1 ;;
        --suite) suite=1 ;;
        --dir) [ $# -ge 2 ] || { echo "--dir needs a folder" >&2; exit 2; }
               dir="$2"; shift ;;
        -*) echo "unknown option $1 (known: --avx2, --suite, --dir DIR)" >&2; exit 2 ;;
        *) rev=$(git -C "$here" rev-parse --short "$1^{commit}" 2> /dev/null) ||
               { echo "not a commit: $1" >&2; exit 2; }
           revs+=("$rev") ;;
    esac
    shift
done
if [ "${#revs[@]}" -lt 1 ] || [ "${#revs[@]}" -gt 2 ]; then
    echo "usage: bash benchmarks/tiny_world.sh [--avx2] [--suite] [--dir DIR] REV [REV2]" >&2
    exit 2
fi
if [ "$suite" = 1 ]; then
    for rev in "${revs[@]}"; do
        git -C "$here" show "$rev:tests/workflow_helpers.py" 2> /dev/null | grep -q "^def suite_world_config" ||
            { echo "no suite world at $rev (tests/workflow_helpers.py has no suite_world_config)" >&2; exit 2; }
    done
fi
command -v /usr/bin/time > /dev/null || { echo "/usr/bin/time missing (Debian package time)" >&2; exit 2; }
if [ "$avx2" = 1 ]; then
    bash "$here/benchmarks/avx2.sh" true || { echo "--avx2: benchmarks/avx2.sh cannot run here" >&2; exit 2; }
fi
for rev in "${revs[@]}"; do
    wd="$dir/$rev"
    rm -rf "$wd" && mkdir -p "$wd"
    git -C "$here" archive "$rev" | tar -x -C "$wd"
    ln -s "$(dirname "$(dirname "$python")")" "$wd/.venv"   # the environment the jobs find beside the workflow
    if [ "$suite" = 1 ]; then
        (cd "$wd/tests" && "$python" -c 'import yaml, workflow_helpers as w
yaml.safe_dump(w.suite_world_config(), open("../config.yaml", "w"), sort_keys=False)')
    fi
    run=("$python" -m snakemake --profile profiles/local)
    (
        cd "$wd"
        export HF_HUB_OFFLINE=1
        timed=(/usr/bin/time -f "%e %U %S" -o time.txt "${run[@]}")
        if [ "$avx2" = 1 ]; then
            bash "$here/benchmarks/avx2.sh" "${timed[@]}" > run.log 2>&1
        else
            "${timed[@]}" > run.log 2>&1
        fi
    ) || { echo "tiny world at $rev failed: $wd/run.log" >&2; tail -20 "$wd/run.log" >&2; exit 1; }
done
"$python" - "$dir" "$avx2" "$suite" "${revs[@]}" <<'EOF'
import glob, os, sys
import pandas as pd

root, avx2, suite, revs = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4:]
runs = {}
for rev in revs:
    wall, user, system = map(float, open(os.path.join(root, rev, "time.txt")).read().split()[-3:])
    bench = os.path.join(root, rev, "results", "benchmarks")
    by_rule = {}
    for path in glob.glob(os.path.join(bench, "**", "*.tsv"), recursive=True):
        rule = os.path.relpath(path, bench).split(os.sep)[0]
        by_rule[rule] = by_rule.get(rule, 0.0) + float(pd.read_csv(path, sep="\t")["s"].sum())
    runs[rev] = {"wall": wall, "cpu": user + system, "rules": by_rule}
print(f"{'the suite' if suite else 'the README'}'s tiny world from a fresh folder"
      f"{' (AVX2-only kind simulated)' if avx2 else ''}, one run after the other")
table = pd.DataFrame({rev: pd.Series(r["rules"]) for rev, r in runs.items()}).fillna(0.0)
table = table.sort_values(revs[0], ascending=False).round(1)
if len(revs) == 2:
    table["ratio"] = (table[revs[1]] / table[revs[0]]).round(2)
print(table.to_string())
for rev, r in runs.items():
    print(f"{rev}: wall {r['wall']:.0f} s, CPU {r['cpu']:.0f} s, job-seconds {sum(r['rules'].values()):.0f}")
if len(revs) == 2:
    a, b = runs[revs[0]], runs[revs[1]]
    print(f"{revs[1]} / {revs[0]}: wall {b['wall'] / a['wall']:.2f}x, CPU {b['cpu'] / a['cpu']:.2f}x")
EOF
