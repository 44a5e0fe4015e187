#!/usr/bin/env bash
# The test command (README and .ci/run): install, then the whole suite, slow tests included.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset); MIALAB_TEST_WORKERS=0
# runs the suite in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's seconds, the machine and the junit files of both passes go to .suite/
# (python benchmarks/suite_phases.py: where the time went).
rm -rf .suite && mkdir -p .suite
# busy: the machine's CPU time so far (all cores, /proc/stat, in clock ticks); a phase records its seconds and
# the core-seconds the machine was busy meanwhile (CPU-bound or waiting: benchmarks/suite_phases.py).
busy() { awk '/^cpu /{printf "%d\n", $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat 2>/dev/null || echo 0; }
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
# begin: a phase starts here; phase NAME: it ends, a line of .suite/phases.tsv
begin() { start=$SECONDS; b0=$(busy); }
phase() { printf '%s\t%s\t%s\n' "$1" "$((SECONDS - start))" "$((($(busy) - b0) / hz))" >> .suite/phases.tsv; }
begin
# The vLLM venv (its own, scripts/setup_vllm.sh) is built beside the main install: the two share nothing, and
# each is one pip process, so side by side they fill both cores. "vLLM environment" is the wait for it after the
# install.
vllm_setup=
if [ -f scripts/setup_vllm.sh ]; then
    bash scripts/setup_vllm.sh > .suite/setup_vllm.log 2>&1 &
    vllm_setup=$!
fi
bash scripts/install.sh || { [ -z "$vllm_setup" ] || kill "$vllm_setup" 2>/dev/null; exit 1; }
phase install
begin
if [ -n "$vllm_setup" ]; then
    wait "$vllm_setup" || { cat .suite/setup_vllm.log >&2; exit 1; }
    cat .suite/setup_vllm.log
fi
phase "vLLM environment"
.venv/bin/python benchmarks/suite_phases.py --machine .suite
export HF_HUB_OFFLINE=1
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (CI): the test modules pytest rewrites (the second
# pass's workers and the suite's pytest runs read them instead of rewriting all of them at collection) and any
# module a job imports first.
unset PYTHONDONTWRITEBYTECODE
set +e
# Two pytest-xdist workers: the tiny world's tests start on one (its Snakemake uses both cores, but
# not all the time), the SLURM tests on the other, then the other slow tests and the quick ones fill in
# (tests/conftest.py groups and orders them).
begin
.venv/bin/python -m pytest -n "${MIALAB_TEST_WORKERS:-2}" --dist loadgroup --junitxml .suite/first.xml tests "$@"
rc=$?
phase "suite"
set -e
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"
[ $# -eq 0 ] || exit 0   # a chosen subset: no second pass
# Second pass: the quick tests that run the code (not the plan-only ones) on pyproject.toml's oldest
# versions where a version changes behaviour (envs/oldest.txt), laid over the venv in .venv-oldest/.
begin
.venv/bin/python -m pip install --quiet --no-deps --target .venv-oldest -r envs/oldest.txt
PYTHONPATH="$PWD/.venv-oldest" .venv/bin/python -m pytest -n "${MIALAB_TEST_WORKERS:-2}" --dist loadgroup \
    -m "not slow and not plans" -p no:cacheprovider --durations=5 --junitxml .suite/oldest.xml tests \
    --ignore tests/test_documented_commands.py --ignore tests/test_content_keys.py --ignore tests/test_rehearsal.py \
    --ignore tests/test_workflow.py --ignore tests/test_sizing.py --ignore tests/test_cluster_checks.py \
    --ignore tests/test_rule_patterns.py --ignore tests/test_paper_configs.py --ignore tests/test_layers.py \
    --ignore tests/test_gpu_check.py
phase "oldest versions"
.venv/bin/python benchmarks/suite_phases.py .suite
