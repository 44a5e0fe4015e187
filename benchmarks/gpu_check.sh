#!/usr/bin/env bash
# The GPU check (one GPU machine, about ten minutes): the tiny world's GPU-capable stages through the real
# workflow on CUDA (pretraining, DeepSpeed ZeRO-2 SFT over NCCL in bf16, scoring, N-Sampling rollouts, GRPO
# for the RL checkpoints and ADRA with LoRA in bf16, LaRA features, CalibDCD's reference / features /
# VeilProbe), one line per rule, then throughputs of a random-init 7B architecture. Not part of CI (no GPU
# there); the suite tests the CPU side (tests/test_gpu_check.py). The last run: docs/slurm.md, "The GPU check".
#
#   bash benchmarks/gpu_check.sh prepare     # the CPU machine (this project's .venv): .gpucheck/part-N/, the
#                                            # wheels the GPU machine lacks (benchmarks/gpu_check/image.txt)
#   bash benchmarks/gpu_check.sh install N   # the GPU machine, one call per part (each carries .gpucheck/part-N)
#   bash benchmarks/gpu_check.sh run         # the GPU machine, after the last part: the check itself
#
# The parts install into $GPU_CHECK_SITE (default /tmp/site), which a warm GPU machine keeps between calls.
# `run` works in $GPU_CHECK_WORKDIR (default /tmp/gpu-check: a fresh tiny world), prints its table, and copies
# the table and the failed jobs' logs to $OUT when that is set. Its exit code: the number of failed jobs (at most 1).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
SITE=${GPU_CHECK_SITE:-/tmp/site}
WORK=${GPU_CHECK_WORKDIR:-/tmp/gpu-check}
PY=${PYTHON:-python3}

case "${1:-}" in
prepare)
    exec "${PYTHON:-.venv/bin/python}" benchmarks/gpu_check.py prepare --out "$REPO/.gpucheck"
    ;;
install)
    exec "$PY" benchmarks/gpu_check.py install ".gpucheck/part-${2:?which part}" --site "$SITE"
    ;;
run)
    export PYTHONPATH="$SITE:$REPO" PATH="$SITE/bin:$PATH" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TORCH_CUDA_ARCH_LIST=9.0
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
    "$PY" benchmarks/gpu_check.py versions || echo "versions: some outside pyproject.toml's ranges (above); the check goes on"
    if [ -d "$SITE-root/usr/share/wordnet" ]; then   # the carried wordnet-base, read through mialab's cache
        export MIALAB_WORDNET_CACHE=/tmp/wordnet-cache
        "$PY" -c "from mialab.text.wordnet import prepare_corpus; prepare_corpus('$SITE-root/usr/share/wordnet')"
    fi
    rm -rf "$WORK" && mkdir -p "$WORK" && cp config.yaml "$WORK/" && ln -s "$REPO/resources" "$WORK/resources"
    start=$(date +%s)
    # the README's tiny world with ADRA (configs/tiny_adra.yaml), every job on this machine's GPU
    timeout "${GPU_CHECK_TIMEOUT:-420}" "$PY" -m snakemake all adra -s "$REPO/Snakefile" -d "$WORK" \
        --profile "$REPO/profiles/local" --cores 16 --scheduler greedy --keep-going \
        --configfile "$WORK/config.yaml" "$REPO/configs/tiny_adra.yaml" > "$WORK/snakemake.out" 2>&1
    echo "snakemake: exit $? after $(($(date +%s) - start)) s"
    log=$(ls -t "$WORK"/.snakemake/log/*.snakemake.log 2>/dev/null | head -1)
    [ -n "$log" ] || { tail -40 "$WORK/snakemake.out"; exit 1; }
    "$PY" benchmarks/gpu_check.py summarize "$log" --workdir "$WORK" | tee "$WORK/table.txt"
    failed=${PIPESTATUS[0]}
    tail -5 "$WORK/snakemake.out"
    timeout 60 "$PY" benchmarks/gpu_check.py cudnn 2>&1 | grep -E "^CUDNN_SDPA|Error"
    timeout "${GPU_CHECK_THROUGHPUT_TIMEOUT:-120}" "$PY" benchmarks/gpu_check.py throughput --arch llama2-7b 2>&1 | grep -E "^THROUGHPUT|Error"
    if [ -n "${OUT:-}" ]; then
        cp "$WORK/table.txt" "$WORK/snakemake.out" "$log" "$OUT/" 2>/dev/null
        tar czf "$OUT/logs.tgz" -C "$WORK" results/logs 2>/dev/null
    fi
    exit "$failed"
    ;;
*)
    sed -n '2,16p' "$0"
    exit 2
    ;;
esac
