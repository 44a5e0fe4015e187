#!/usr/bin/env bash
# Stop the test SLURM booted by tests/slurm/boot.sh: cancel its jobs, then end exactly the
# daemons recorded under $MIALAB_SLURM_DIR/pids (default /tmp/mialab-slurm), by PID, newest
# first. A PID whose process is no longer the recorded daemon (PID reuse) is left alone.
# With --purge the state folder (confs, logs, database) is removed as well.
set -uo pipefail

STATE=${MIALAB_SLURM_DIR:-/tmp/mialab-slurm}
export SLURM_CONF="$STATE/etc/slurm.conf"

if [[ -s $STATE/pids/slurmctld ]] && kill -0 "$(cat "$STATE/pids/slurmctld")" 2>/dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    [[ -n ${jobs// /} ]] && scancel $jobs 2>/dev/null
fi

for name in slurmd slurmctld slurmdbd mariadbd munged; do
    pidfile="$STATE/pids/$name"
    [[ -s $pidfile ]] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name"* ]]; then
        kill -TERM "$pid"
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
        echo "[slurm-stop] stopped $name ($pid)" >&2
    fi
    rm -f "$pidfile"
done

[[ $(readlink /etc/slurm/slurm.conf 2>/dev/null) == "$SLURM_CONF" ]] && rm -f /etc/slurm/slurm.conf
[[ ${1:-} == --purge ]] && rm -rf "$STATE"
exit 0
