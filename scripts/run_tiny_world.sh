#!/usr/bin/env bash
# One command from a fresh machine to a report: install, run the default (tiny world) workflow
# end to end on this machine's CPUs, and build the Snakemake HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1
.venv/bin/snakemake --profile profiles/local "$@"
.venv/bin/snakemake --profile profiles/local --report results/report.html
echo "Results: results/evaluation/summary.md   Report: results/report.html"
