#!/usr/bin/env bash
# The exposure sweep of the tiny world (configs/sweep_exposure.yaml): r in {0, 1, 2, 4, 8, 16}, every
# method of the results table at every r; sized for about an hour on 2 cores. Run from the repository
# root (or a working directory holding config.yaml, configs/ and resources/):
#   bash benchmarks/sweep_exposure.sh
# Output: results/sweep/exposure/sweep.md / .csv / .png; each exposure's run log in r~<r>/run.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${MIALAB_PYTHON:-$here/.venv/bin/python}"
start=$(date +%s)
"$python" -m snakemake -s "$here/workflow/sweep.smk" --configfile configs/sweep_exposure.yaml --cores 2 "$@"
echo "exposure sweep: $(( $(date +%s) - start )) s wall"
