#!/usr/bin/env bash
# GPU smoke check (one H200 is enough): bf16 scoring on CUDA, DeepSpeed ZeRO-2 SFT over NCCL in bf16,
# TRL GRPO + LoRA in bf16 (ADRA), rollouts on CUDA. Not part of CI: CI machines have no GPU.
#
# Prepare on a machine with the tiny world built (results/), then run on the GPU machine from the
# repository root with the prepared folders beside it:
#   bash benchmarks/gpu_smoke.sh prepare    # writes .smoke/ (command lines) from a dry run
#   bash benchmarks/gpu_smoke.sh run        # on the GPU machine; wheels in .whl/ are installed first
# Every stage prints "SMOKE <stage> ok|FAIL ..."; the exit code is the number of failed stages.
set -uo pipefail
cd "$(dirname "$0")/.."

prepare() {
    mkdir -p .smoke
    cat > .smoke/gpu_overlay.yaml <<'EOF'
overlay_of: config.yaml
models:
  sft:
    train: {epochs: 1, precision: bf16}
adra:
  train: {precision: bf16, max_steps: 4, save_steps: 2}
EOF
    snakemake --profile profiles/local --configfile config.yaml configs/tiny_adra.yaml .smoke/gpu_overlay.yaml \
        -n -p --forceall adra > .smoke/dryrun.txt 2>&1
    grep -E "^Shell command: .*sft_contaminate.py .*--out results/models/sft/" .smoke/dryrun.txt | head -1 > .smoke/sft.sh
    grep -E "^Shell command: .*adra_train.py .*seed-0/.*adra/seed-0" .smoke/dryrun.txt | head -1 > .smoke/adra.sh
    sed -i "s#^Shell command: ##; s#$(command -v python3)#python3#; s#$PWD/##g; s# > results/logs.*##" .smoke/*.sh
    wc -l .smoke/sft.sh .smoke/adra.sh
}

stage() {  # stage NAME TIMEOUT CMD...: run one stage, print its wall time, count failures
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@"
    rc=$?
    echo "SMOKE $name rc=$rc wall_s=$(($(date +%s) - start))"
    [ "$rc" = 0 ] || failed=$((failed + 1))
    return "$rc"
}

run() {
    failed=0
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    if compgen -G ".whl/*.whl" > /dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
        export PYTHONPATH=/tmp/site
    fi
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
    local sft_out base wikimia aime adra_out
    sft_out=$(grep -o -- "--out [^ ]*" .smoke/sft.sh | cut -d' ' -f2)
    base=$(grep -o -- "--init [^ ]*" .smoke/sft.sh | cut -d' ' -f2)
    aime=$(grep -o -- "--split [^ ]*" .smoke/adra.sh | cut -d' ' -f2)
    adra_out=$(grep -o -- "--out-adapters [^ ]*" .smoke/adra.sh | cut -d' ' -f2)
    wikimia=$(ls results/splits/wikimia/seed-0/*/split.parquet | head -1)
    stage env 60 python3 benchmarks/gpu_smoke.py env || exit 1
    stage scoring 120 python3 benchmarks/gpu_smoke.py scoring "$base" "$wikimia"
    stage sft 300 bash .smoke/sft.sh
    [ -d "$sft_out" ] && stage sft-check 90 python3 benchmarks/gpu_smoke.py sft-check "$base" "$sft_out" "$aime"
    [ -d "$sft_out" ] && stage adra-train 240 bash .smoke/adra.sh
    [ -d "$adra_out" ] && stage rollouts 120 python3 benchmarks/gpu_smoke.py rollouts "$sft_out" "$adra_out" "$aime" \
        "$(dirname "$adra_out")/manifest.json"
    echo "SMOKE failed_stages=$failed"
    exit "$failed"
}

"$@"
