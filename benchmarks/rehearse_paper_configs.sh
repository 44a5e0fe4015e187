#!/usr/bin/env bash
# Every paper config (configs/paper/*.yaml, or the names given) rehearsed end to end on the CPU, each in a fresh
# working directory under ${MIALAB_REHEARSALS:-/tmp/mialab-rehearsals}/<name>, with its wall time and CPU time.
# The suite rehearses ADRA's AIME config end to end (through SLURM), LaRA's on one of its datasets and CalibDCD's up
# to its features, and plans the other eight (tests/test_rehearsal.py); this runs all eleven end to end, e.g. before
# a release:
#   bash benchmarks/rehearse_paper_configs.sh                      # all eleven
#   bash benchmarks/rehearse_paper_configs.sh adra_tulu3 adra_olympiad
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${MIALAB_PYTHON:-$here/.venv/bin/python}"
root="${MIALAB_REHEARSALS:-/tmp/mialab-rehearsals}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
if [ "$#" -eq 0 ]; then
    set -- $(cd "$here/configs/paper" && ls *.yaml | sed 's/\.yaml$//')
fi
for name in "$@"; do
    config="$here/configs/paper/$name.yaml"
    [ -f "$config" ] || { echo "no paper config $config" >&2; exit 2; }
    workdir="$root/$name"
    mkdir -p "$workdir"
    ln -sfn "$here/resources" "$workdir/resources"
    cp "$config" "$workdir/config.yaml"
    start=$(date +%s)
    TIMEFORMAT="%U %S"
    { time "$python" -m snakemake -s "$here/Snakefile" -d "$workdir" --configfile "$workdir/config.yaml" \
        --profile "$here/profiles/local" --config rehearsal=true > "$workdir/run.log" 2>&1; } 2> "$workdir/cpu.txt" \
        || { echo "$name: failed, see $workdir/run.log" >&2; exit 1; }
    read -r user sys < "$workdir/cpu.txt"
    echo "$name: $(( $(date +%s) - start )) s wall, $(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%.0f", u + s}') CPU-s"
done
