#!/usr/bin/env bash
# Set up everything the tiny world and the tests need, offline-capable after this step:
# a virtual environment in .venv with the CPU build of torch (installed first, so pip never
# pulls a CUDA build) and the project in editable mode, at the versions the suite is tested on. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Debian packages, installed when missing and root: WordNet (wordnet-base) backs the offline paraphrasers; ccache
# makes the DeepSpeed op's compile below a cache hit in the next environment (mialab.core.launch.compiler_cache_dir).
missing=$(for pkg in wordnet-base ccache; do dpkg -s "$pkg" >/dev/null 2>&1 || echo "$pkg"; done)
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        # shellcheck disable=SC2086  # one word per package
        apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    else
        echo "warning: Debian packages missing: $missing (wordnet-base: the offline paraphrase backends;" \
            "ccache: the DeepSpeed op compiled again in each environment)" >&2
    fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0 -c envs/constraints.txt
# the tested versions (envs/constraints.txt): a new release enters only by a change to that file
.venv/bin/python -m pip install --quiet -e ".[test]" -c envs/constraints.txt
# the project's modules as bytecode (an editable install leaves them as source): every Snakemake process and job
# imports them, and where PYTHONDONTWRITEBYTECODE is set, as on CI, each would compile them again; a module edited
# later is compiled from its source as usual (its bytecode no longer matches it)
.venv/bin/python -m compileall -q -j 0 mialab > /dev/null
# DeepSpeed compiles its CPU collective op on first use: do it here, not in the first SFT job
.venv/bin/python -m mialab.core.launch --build-ops
echo "mialab installed in $(pwd)/.venv ($(.venv/bin/python -c 'import torch, transformers, snakemake; print("torch", torch.__version__, "transformers", transformers.__version__, "snakemake", snakemake.__version__)'))"
