#!/usr/bin/env bash
# The test command (README and .ci/run): install, then the whole suite, slow tests included.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset); MIALAB_TEST_WORKERS=0
# runs the suite in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
if [ -f scripts/setup_vllm.sh ]; then
    bash scripts/setup_vllm.sh
fi
export HF_HUB_OFFLINE=1
set +e
# Two pytest-xdist workers: the tiny world's tests run on one (its Snakemake uses both cores, but
# not all the time), the SLURM tests and the quick ones beside it (tests/conftest.py groups them).
.venv/bin/python -m pytest -n "${MIALAB_TEST_WORKERS:-2}" --dist loadgroup tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit "$rc"
