#!/usr/bin/env bash
# Run a command as on the CPU kind without AVX-512 and AMX (one of CI's kinds), simulated on a CPU with them:
# the command and every process it starts (Snakemake's jobs, the test SLURM's daemons and jobs it boots) read a
# /proc/cpuinfo without those flags, so `auto` resolves to fp32 there as on that kind and DeepSpeed's CPU op is
# built for AVX2, and torch, oneDNN and MKL are held to AVX2. The clock speed and caches stay this machine's.
# Needs root (a private mount namespace: unshare -m, mount --bind); exits with the command's status.
#   bash benchmarks/avx2.sh COMMAND [ARG...]      e.g. CI=true bash benchmarks/avx2.sh bash .ci/run
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bash benchmarks/avx2.sh COMMAND [ARG...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "benchmarks/avx2.sh needs root (unshare -m, mount --bind)" >&2; exit 2; }
cpuinfo="$(mktemp "${TMPDIR:-/tmp}/cpuinfo-avx2.XXXXXX")"
trap 'rm -f "$cpuinfo"' EXIT
sed 's/ avx512[a-z0-9_]*//g; s/ amx[a-z0-9_]*//g' /proc/cpuinfo > "$cpuinfo"
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
# shellcheck disable=SC2016  # $1 and $@ are the inner shell's
unshare -m sh -c 'mount --bind "$1" /proc/cpuinfo && shift && exec "$@"' sh "$cpuinfo" "$@"
