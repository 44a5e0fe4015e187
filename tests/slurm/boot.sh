#!/usr/bin/env bash
# Boot a single-node SLURM 22.05 with accounting (slurmdbd + MariaDB) for mialab's tests.
#
# Idempotent: when the daemons recorded under the state folder are alive and the node answers,
# it only prints the environment line and exits 0. All state (confs, PIDs, spool, logs, the
# database) lives under one folder, $MIALAB_SLURM_DIR (default /tmp/mialab-slurm).
# Every daemon is bound to loopback; MariaDB has no network at all (--skip-networking).
# The node advertises twice this machine's CPUs (below: why), its memory and eight fake H200 GPUs.
#
# Usage:  eval "$(tests/slurm/boot.sh)"   boots, then exports SLURM_CONF and the MIALAB_SLURM_*
#                                        variables that fit profiles/slurm to this node
#         tests/slurm/stop.sh             ends exactly the daemons started here, by PID
# Exit codes: 0 up, 1 could not boot (reason on stderr), 3 packages missing and not installable.
set -euo pipefail

STATE=${MIALAB_SLURM_DIR:-/tmp/mialab-slurm}
CLUSTER=${MIALAB_SLURM_CLUSTER:-mialab}
PARTITION=${MIALAB_SLURM_PARTITION:-mialab}
ACCOUNT=${MIALAB_SLURM_ACCOUNT:-mialab}
CTLD_PORT=${MIALAB_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${MIALAB_SLURM_SLURMD_PORT:-6818}
DBD_PORT=${MIALAB_SLURM_DBD_PORT:-6819}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOST=$(hostname -s)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
export SLURM_CONF="$STATE/etc/slurm.conf"
export MYSQL_UNIX_PORT="$STATE/run/mysql.sock"

log() { echo "[slurm-boot] $*" >&2; }

die() {
    echo "[slurm-boot] ERROR: $*" >&2
    for f in "$STATE"/log/*; do
        [[ -s $f ]] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.5 s until it succeeds.
wait_for() {
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out after ${seconds}s waiting for $what"
        sleep 0.5
    done
}

# The environment for clients and for profiles/slurm on this node; a first comment line says
# whether this call booted the daemons or found them up. An 8-GPU job gets one CPU and 2 GB,
# so that a CPU job still fits beside it on this small node.
print_env() {
    echo "# mialab-slurm: $1"
    echo "export SLURM_CONF=$SLURM_CONF"
    echo "export MIALAB_SLURM_ACCOUNT=$ACCOUNT MIALAB_SLURM_PARTITION=$PARTITION MIALAB_SLURM_CPU_PARTITION=$PARTITION"
    echo "export MIALAB_SLURM_GPU_CPUS=1 MIALAB_SLURM_GPU_MEM_MB=2000"
}

alive() { [[ -s "$STATE/pids/$1" ]] && kill -0 "$(cat "$STATE/pids/$1")" 2>/dev/null; }

node_ready() { sinfo -h -N -n "$HOST" -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; }

is_up() {
    local d
    for d in "${DAEMONS[@]}"; do alive "$d" || return 1; done
    node_ready
}

install_packages() {
    local missing=0 b
    for b in slurmctld slurmd slurmdbd munged mariadbd sacct sacctmgr; do
        command -v "$b" >/dev/null 2>&1 || missing=1
    done
    ((missing)) || return 0
    ((EUID == 0)) || { echo "[slurm-boot] packages missing and not root: ${PACKAGES[*]}" >&2; exit 3; }
    log "installing ${PACKAGES[*]}"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}"; } \
        >"/tmp/mialab-slurm-apt.log" 2>&1; then
        tail -n 20 /tmp/mialab-slurm-apt.log >&2
        echo "[slurm-boot] could not install ${PACKAGES[*]} (log: /tmp/mialab-slurm-apt.log)" >&2
        exit 3
    fi
}

# The host name must resolve to loopback from /etc/hosts (never through DNS).
ensure_loopback_hostname() {
    if ! awk -v h="$HOST" '$1 ~ /^127\./ { for (i = 2; i <= NF; i++) if ($i == h) found = 1 } END { exit !found }' /etc/hosts; then
        log "mapping $HOST to 127.0.1.1 in /etc/hosts"
        local tmp
        tmp=$(mktemp)
        { echo "127.0.1.1 $HOST"; cat /etc/hosts; } >"$tmp"
        cat "$tmp" >/etc/hosts
        rm -f "$tmp"
    fi
}

# The slurm-jobstep plugin (0.6) strips SLURM_CONF before its nested `srun`, and a SLURM client
# without a config falls back to a DNS SRV lookup. So the default path links to this config;
# a real file there belongs to someone else and is never replaced.
link_default_conf() {
    local default=/etc/slurm/slurm.conf
    [[ -e $default && ! -L $default ]] && die "$default is a real file (another SLURM?); not replacing it"
    mkdir -p /etc/slurm
    ln -sfn "$SLURM_CONF" "$default"
}

render() { # render TEMPLATE OUT: substitute @VARS@
    sed -e "s|@STATE@|$STATE|g" -e "s|@HOST@|$HOST|g" -e "s|@CLUSTER@|$CLUSTER|g" \
        -e "s|@PARTITION@|$PARTITION|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" \
        -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
        -e "s|@CPUS@|$CPUS|g" -e "s|@MEM_MB@|$MEM_MB|g" "$1" >"$2"
}

# start NAME CMD...: run a daemon in the foreground of its own session; record its PID.
start() {
    local name=$1
    shift
    setsid "$@" >>"$STATE/log/$name.out" 2>&1 </dev/null &
    echo $! >"$STATE/pids/$name"
}

if [[ -d $STATE/pids ]] && is_up; then
    log "already up ($STATE)"
    print_env "already up"
    exit 0
fi
install_packages
"$HERE/stop.sh" >/dev/null 2>&1 || true # leftovers of a half-booted earlier attempt
ensure_loopback_hostname

# Twice this machine's cores: a job that waits for the executor's next status check (which backs off by 10 s at
# every check that finds no job finished, mialab's jobs run seconds) leaves its core to another job instead of
# idling it; task/none binds no job to a core, and config_overrides lets slurmd accept more CPUs than it finds.
CPUS=$(($(nproc) * 2))
# Advertise 90% of physical memory so slurmd never finds less than configured.
MEM_MB=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
mkdir -p "$STATE"/{etc,run,log,pids,ctld,spool,munge,dev,db}
chmod 700 "$STATE/munge"
render "$HERE/templates/slurm.conf.in" "$STATE/etc/slurm.conf"
render "$HERE/templates/gres.conf.in" "$STATE/etc/gres.conf"
render "$HERE/templates/slurmdbd.conf.in" "$STATE/etc/slurmdbd.conf"
chmod 600 "$STATE/etc/slurmdbd.conf"
link_default_conf
for i in 0 1 2 3 4 5 6 7; do ln -sfn /dev/null "$STATE/dev/nvidia$i"; done

log "munged"
[[ -s $STATE/munge/munge.key ]] || { head -c 1024 /dev/urandom >"$STATE/munge/munge.key"; chmod 400 "$STATE/munge/munge.key"; }
start munged munged -F --force --origin=127.0.0.1 --key-file="$STATE/munge/munge.key" \
    --socket="$STATE/munge/munge.socket" --pid-file="$STATE/run/munged.pid" \
    --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed"
wait_for 20 munged test -S "$STATE/munge/munge.socket"

log "mariadbd"
if [[ ! -d $STATE/db/mysql ]]; then
    mariadb-install-db --no-defaults --datadir="$STATE/db" --user=root --skip-test-db \
        --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1 ||
        die "mariadb-install-db failed"
fi
start mariadbd mariadbd --no-defaults --user=root --datadir="$STATE/db" --skip-networking \
    --socket="$MYSQL_UNIX_PORT" --pid-file="$STATE/run/mariadbd.pid" \
    --log-error="$STATE/log/mariadbd.log" --innodb-buffer-pool-size=64M
wait_for 60 mariadbd mariadb --no-defaults -S "$MYSQL_UNIX_PORT" -uroot -e 'SELECT 1'

log "slurmdbd"
start slurmdbd slurmdbd -D
wait_for 60 slurmdbd sacctmgr -n list cluster
sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" description=mialab organization=mialab >/dev/null 2>&1 || true
sacctmgr -i add user "$(id -un)" account="$ACCOUNT" cluster="$CLUSTER" >/dev/null 2>&1 || true
sacctmgr -n -P list assoc user="$(id -un)" account="$ACCOUNT" cluster="$CLUSTER" format=account |
    grep -qx "$ACCOUNT" || die "sacctmgr did not record account $ACCOUNT for $(id -un)"

# A boot starts with an empty queue: jobs recovered from an earlier boot's state belong to processes that
# died with it (a node "running" such a job waits for its batch-start timeout before taking new work), so
# slurmctld clears its state (-c) and slurmd's spool is emptied. Job IDs continue past the last the
# accounting database holds, so an ID names one job across boots.
# (a fresh machine's empty database holds no ID: grep then finds nothing, which must not end the boot)
last_id=$({ sacct -a -X -n -P -o JobIDRaw -S 2000-01-01T00:00:00 -E now 2>/dev/null || true; } |
    { grep -Eo '^[0-9]+' || true; } | sort -n | tail -n 1)
sed -i "s|^FirstJobId=.*|FirstJobId=$(( ${last_id:-0} + 1 ))|" "$SLURM_CONF"
rm -rf "${STATE:?}"/spool/*
log "slurmctld + slurmd"
start slurmctld slurmctld -D -c
wait_for 30 slurmctld scontrol ping
start slurmd slurmd -D -N "$HOST"
deadline=$((SECONDS + 60))
until node_ready; do
    ((SECONDS < deadline)) || die "node $HOST not idle after 60s: $(sinfo -h -N -o '%T %E' 2>&1)"
    sleep 0.5
done
log "up: cluster $CLUSTER, partition $PARTITION, account $ACCOUNT, $CPUS CPUs, $MEM_MB MB, gpu:h200:8 ($STATE)"
print_env booted
