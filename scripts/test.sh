#!/usr/bin/env bash
# The test command (README and .ci/run): install, then the whole suite, slow tests included.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
if [ -f scripts/setup_vllm.sh ]; then
    bash scripts/setup_vllm.sh
fi
export HF_HUB_OFFLINE=1
set +e
.venv/bin/python -m pytest tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit "$rc"
