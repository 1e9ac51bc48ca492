#!/usr/bin/env bash
# A throwaway S3-compatible object store for integration tests: one Ceph monitor, one OSD
# (memstore: data in RAM) and a RADOS Gateway, all on 127.0.0.1, from Debian's packages.
#
#   eval "$(scripts/s3-server.sh start [DIR])"   # boots, prints export lines for the AWS_* variables
#   scripts/s3-server.sh stop [DIR]              # ends what start began, removes DIR
#
# DIR (default /tmp/fidelityfs-s3) holds everything: ceph.conf, keyring, monitor/OSD data, logs,
# pid files, the export lines (DIR/env). Ceph is pointed there with CEPH_CONF; /etc/ceph is never
# used. Only stdout carries the export lines; all progress and errors go to stderr.
# Debian's awscli 2.x ignores AWS_ENDPOINT_URL: pass --endpoint-url "$AWS_ENDPOINT_URL" to it.
# Bucket names shorter than 3 characters are refused by RGW.
# The OSD keeps its data in RAM: FIDELITYFS_S3_MEMSTORE_BYTES (default 1 GiB) bounds what it holds.
set -euo pipefail

BOOT_TIMEOUT=120   # seconds start may take before it gives up (with the log tails)
STOP_TIMEOUT=20    # seconds a daemon gets after SIGTERM before SIGKILL
MARKER=.fidelityfs-s3  # file in DIR that says "this directory is ours, stop may delete it"

log() { printf 's3-server: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() { echo "usage: $0 start|stop [DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
cmd=$1
dir=${2:-/tmp/fidelityfs-s3}
[[ $dir == /* ]] || dir=$PWD/$dir   # daemons chdir to /, so all paths must be absolute
export CEPH_CONF=$dir/ceph.conf

# --- process bookkeeping -------------------------------------------------------------------
# DIR/pids has one line per daemon start began: "NAME PID STARTTIME". STARTTIME (field 22 of
# /proc/PID/stat) guards against a recycled pid: stop only signals a process whose start time
# still matches, so it can never hit an unrelated process.

# Field N (N >= 3) of /proc/PID/stat, or nothing if the process is gone. The comm field (2) may
# contain spaces, so split after its closing parenthesis.
stat_field() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    local -a f
    read -r -a f <<<"$stat"
    echo "${f[$(($2 - 3))]}"
}

# True while PID is the process we recorded and has not exited. An exited child that nobody has
# reaped yet stays in /proc as a zombie (state Z), so kill -0 would still succeed on it.
running() {  # PID STARTTIME
    local state
    state=$(stat_field "$1" 3)
    [[ -n $state && $state != Z && $state != X && $(stat_field "$1" 22) == "$2" ]]
}

# Start a daemon in the foreground (-f) in its own session, detached from our stdout (else
# `$(... start)` would wait for it) and from the terminal's signals; record its pid.
spawn() {  # NAME COMMAND...
    local name=$1; shift
    # setsid execs in place (we are not a process group leader), so $! is the daemon itself.
    setsid "$@" </dev/null >>"$dir/log/$name.out" 2>&1 &
    local pid=$!
    local start
    start=$(stat_field "$pid" 22)
    echo "$name $pid $start" >>"$dir/pids"
}

# Waits up to SECS for process PID to exit, on a pidfd: it becomes readable when the process
# exits, zombie or not (our daemons are not our children, so we cannot wait(2) for them).
wait_exit() {  # PID SECS
    /usr/bin/python3 -c 'import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
select.select([fd], [], [], float(sys.argv[2]))' "$1" "$2" || true
}

# Signal every recorded daemon (newest first: rgw, osd, mon), wait for each to exit.
stop_daemons() {
    [[ -f $dir/pids ]] || return 0
    local -a lines
    mapfile -t lines <"$dir/pids"
    local i name pid start deadline
    for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
        read -r name pid start <<<"${lines[i]}"
        running "$pid" "$start" || continue
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        wait_exit "$pid" "$STOP_TIMEOUT"
        if running "$pid" "$start"; then
            log "$name did not exit in ${STOP_TIMEOUT}s, SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            wait_exit "$pid" 10
            running "$pid" "$start" && die "$name (pid $pid) survived SIGKILL"
        fi
    done
    rm -f "$dir/pids"
}

any_running() {
    [[ -f $dir/pids ]] || return 1
    local name pid start
    while read -r name pid start; do
        running "$pid" "$start" && return 0
    done <"$dir/pids"
    return 1
}

# --- start ----------------------------------------------------------------------------------

free_port() {  # a TCP port on 127.0.0.1 nobody listens on now
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

random_hex() {  # N random bytes as 2N hex digits (no pipe into head: that fails under pipefail)
    od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'
}

install_if_missing() {
    local missing=0 tool
    for tool in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl; do
        command -v "$tool" >/dev/null || missing=1
    done
    ((missing)) || return 0
    log "installing Ceph (radosgw ceph-mon ceph-osd ceph-common)"
    export DEBIAN_FRONTEND=noninteractive
    # Update the package lists only when apt has none yet, or when the install fails without.
    if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then apt-get update >&2; fi
    apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-common curl >&2 ||
        { apt-get update >&2 && apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-common curl >&2; }
}

# On a failed start: show what the daemons said, end them, keep DIR for a post-mortem.
fail_start() {
    log "error: $*"
    local f
    for f in "$dir"/log/*; do
        [[ -s $f ]] || continue
        printf '\n--- tail of %s\n' "$f" >&2
        tail -n 20 "$f" >&2
    done
    stop_daemons || true
    log "left $dir for inspection; '$0 stop $dir' removes it"
    exit 1
}

# DIR made afresh and marked as ours; a DIR that is not ours, or where daemons still run, is refused.
fresh_dir() {
    if [[ -e $dir ]]; then
        [[ -e $dir/$MARKER ]] || die "$dir exists and is not ours; choose another DIR"
        any_running && die "already running in $dir; stop it first: $0 stop $dir"
        rm -rf "$dir"   # a leftover of a failed start
    fi
    mkdir -p "$dir"/{mon,osd,rgw,log,run,crash}
    touch "$dir/$MARKER"
}

# Authentication off everywhere (a throwaway on loopback); with cephx off, radosgw still
# needs "ms mon client mode = crc" or it loops on "get_initial_auth_request returned -13".
# Size-1 pools need "mon allow pool size one". paxos propose interval 0.05 cuts the boot
# from ~13 s to a few. Few PGs per pool: one OSD, and RGW creates about 8 pools.
# mon data avail crit = 0: a nearly full /tmp must not stop the monitor.
write_conf() {  # FSID MON_PORT RGW_PORT
    local fsid=$1 mon_port=$2 rgw_port=$3
    cat >"$CEPH_CONF" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
crash dir = $dir/crash
mon cluster log file = $dir/log/cluster.log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
paxos propose interval = 0.05
mon data avail crit = 0

[mon]
mon data = $dir/mon/\$id

[osd]
osd data = $dir/osd/\$id
osd objectstore = memstore
memstore device bytes = ${FIDELITYFS_S3_MEMSTORE_BYTES:-1073741824}

[client.rgw.a]
rgw data = $dir/rgw
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
EOF

    # A keyring is not needed with auth off, but the tools look for one; an empty one of ours
    # keeps them from reading /etc/ceph.
    ceph-authtool --create-keyring "$dir/keyring" >/dev/null
}

start_monitor() {  # FSID MON_PORT
    log "monitor on 127.0.0.1:$2"
    monmaptool --create --fsid "$1" --addv a "[v2:127.0.0.1:$2]" "$dir/monmap" >/dev/null
    ceph-mon --mkfs -i a --monmap "$dir/monmap" >>"$dir/log/mkfs.out" 2>&1 ||
        fail_start "ceph-mon --mkfs failed"
    spawn mon ceph-mon -f -i a
}

# Register the OSD with the monitor: the client keeps trying to reach the monitor until it
# answers or the boot time is up. Then boot the OSD.
start_osd() {  # DEADLINE (in $SECONDS)
    local deadline=$1 uuid osd_id=''
    uuid=$(cat /proc/sys/kernel/random/uuid)
    osd_id=$(timeout "$((deadline - SECONDS + 5))" ceph --connect-timeout "$((deadline - SECONDS))" osd new "$uuid" \
        2>>"$dir/log/ceph-cli.out") || osd_id=''
    any_running || fail_start "the monitor exited"
    [[ -n $osd_id ]] || fail_start "the monitor did not answer within ${BOOT_TIMEOUT}s"

    log "OSD $osd_id (memstore)"
    mkdir -p "$dir/osd/$osd_id"
    ceph-osd --mkfs -i "$osd_id" --osd-uuid "$uuid" >>"$dir/log/mkfs.out" 2>&1 ||
        fail_start "ceph-osd --mkfs failed"
    spawn osd ceph-osd -f -i "$osd_id"
}

# The gateway listens once it has created its pools, which needs the OSD up: curl retries
# refused connections (once a second) until it answers or the boot time is up.
wait_gateway() {  # ENDPOINT DEADLINE
    local endpoint=$1 deadline=$2 code name pid st
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --retry-connrefused --retry 1000 --retry-delay 1 \
        --retry-max-time "$((deadline - SECONDS))" "$endpoint/" || true)
    if [[ $code == 000 || -z $code ]]; then
        while read -r name pid st; do
            running "$pid" "$st" || fail_start "$name (pid $pid) exited"
        done <"$dir/pids"
        fail_start "the gateway did not answer within ${BOOT_TIMEOUT}s"
    fi
}

# A user with fresh random keys; its export lines go to DIR/env.
write_env() {  # ENDPOINT
    local endpoint=$1 access secret
    access=$(random_hex 10 | tr a-f A-F)
    secret=$(random_hex 20)
    radosgw-admin user create --uid=fidelityfs --display-name=fidelityfs \
        --access-key="$access" --secret="$secret" >>"$dir/log/radosgw-admin.out" 2>&1 ||
        fail_start "radosgw-admin user create failed"

    cat >"$dir/env" <<EOF
export AWS_ENDPOINT_URL=$endpoint
export AWS_ACCESS_KEY_ID=$access
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=us-east-1
EOF
}

start() {
    install_if_missing
    fresh_dir
    local t0=$SECONDS deadline=$((SECONDS + BOOT_TIMEOUT))
    local fsid mon_port rgw_port
    fsid=$(cat /proc/sys/kernel/random/uuid)
    mon_port=$(free_port)
    rgw_port=$(free_port)
    write_conf "$fsid" "$mon_port" "$rgw_port"
    start_monitor "$fsid" "$mon_port"
    start_osd "$deadline"
    log "radosgw on 127.0.0.1:$rgw_port"
    spawn rgw radosgw -f -n client.rgw.a
    local endpoint=http://127.0.0.1:$rgw_port
    wait_gateway "$endpoint" "$deadline"
    write_env "$endpoint"
    log "up in $((SECONDS - t0))s at $endpoint (exports also in $dir/env)"
    cat "$dir/env"
}

# --- stop -----------------------------------------------------------------------------------

stop() {
    [[ -e $dir ]] || { log "nothing at $dir"; return 0; }
    [[ -e $dir/$MARKER ]] || die "$dir is not a directory s3-server.sh made; not touching it"
    stop_daemons
    rm -rf "$dir"
    log "stopped, removed $dir"
}

case $cmd in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
