#!/usr/bin/env bash
# The cluster's training environment for ADRA's GRPO with vLLM rollouts (adra.train.vllm): the pinned set of
# envs/grpo-vllm.txt (CUDA 13.0 wheels) in .venv-grpo, plus this project. Python 3.13 (see that file).
# --dry-run only resolves the set (pip install --dry-run) and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.13}
DRY=()
if [ "${1:-}" = "--dry-run" ]; then DRY=(--dry-run); fi
if [ ! -x .venv-grpo/bin/python ]; then
    "$PY" -m venv .venv-grpo
fi
.venv-grpo/bin/python -m pip install --quiet --upgrade pip
.venv-grpo/bin/python -m pip install "${DRY[@]}" --extra-index-url https://download.pytorch.org/whl/cu130 -r envs/grpo-vllm.txt
if [ ${#DRY[@]} -eq 0 ]; then
    .venv-grpo/bin/python -m pip install --quiet --no-deps -e .
    echo "GRPO + vLLM environment in $(pwd)/.venv-grpo: activate it (source .venv-grpo/bin/activate) before snakemake"
fi
