#!/usr/bin/env bash
# A throwaway static HTTP(S) server for integration tests and benchmarks: Debian's nginx serving
# a folder read-only on 127.0.0.1 (range requests, ETags, keep-alive, sendfile).
#
#   eval "$(scripts/http-server.sh start [DIR] [--root ROOT] [--tls] [--json-index])"   # prints export lines
#   scripts/http-server.sh restart [DIR]     # stops nginx and starts it again on the same port
#   scripts/http-server.sh stop [DIR]                                    # ends it, removes DIR
#
# DIR (default /tmp/fidelityfs-http) holds everything: nginx.conf, pid file, logs, temp paths,
# the export lines (DIR/env) and, with --tls, a throwaway test CA (DIR/tls/ca.pem) and a server
# certificate for 127.0.0.1 and localhost signed by it. ROOT (default DIR/www, created empty) is
# the folder served; it is only read. --json-index lists folders (a GET of PATH/) as nginx's
# JSON autoindex, what `fidelityfs pack http://...` reads; without it folders are not listed.
# Only stdout carries the export lines:
#   FIDELITYFS_HTTP_URL   http[s]://127.0.0.1:PORT
#   FIDELITYFS_HTTP_ROOT  the folder served
#   FIDELITYFS_HTTP_CA    (--tls only) the CA file that verifies the server (curl --cacert)
# Progress and errors go to stderr.
set -euo pipefail

START_TIMEOUT=10  # seconds start may wait for the server to answer
STOP_TIMEOUT=10   # seconds nginx gets after SIGTERM before SIGKILL
PORT_TRIES=5      # ports tried when a free port is taken before nginx binds it
MARKER=.fidelityfs-http  # file in DIR that says "this directory is ours, stop may delete it"

log() { printf 'http-server: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { echo "usage: $0 start [DIR] [--root ROOT] [--tls] [--json-index] | $0 restart [DIR] | $0 stop [DIR]" >&2; exit 2; }

[[ $# -ge 1 ]] || usage
cmd=$1; shift
dir='' root='' tls=0 json_index=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --tls) tls=1 ;;
        --json-index) json_index=1 ;;
        --root) [[ $# -ge 2 ]] || usage; root=$2; shift ;;
        --root=*) root=${1#--root=} ;;
        -*) usage ;;
        *) [[ -z $dir ]] || usage; dir=$1 ;;
    esac
    shift
done
dir=${dir:-/tmp/fidelityfs-http}
[[ $dir == /* ]] || dir=$PWD/$dir   # nginx resolves relative paths against its prefix
if [[ -n $root && $root != /* ]]; then root=$PWD/$root; fi
if [[ $cmd != start && ( -n $root || $tls == 1 || $json_index == 1 ) ]]; then usage; fi

# --- process bookkeeping (as scripts/s3-server.sh) ---------------------------------------------
# DIR/pid holds "PID STARTTIME" of the nginx master. STARTTIME (field 22 of /proc/PID/stat)
# guards against a recycled pid: stop only signals the process it recorded.

stat_field() {  # PID N: field N (N >= 3) of /proc/PID/stat, nothing if the process is gone
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    local -a f
    read -r -a f <<<"$stat"
    echo "${f[$(($2 - 3))]}"
}

running() {  # PID STARTTIME: the recorded process exists and has not exited (zombies have)
    local state
    state=$(stat_field "$1" 3)
    [[ -n $state && $state != Z && $state != X && $(stat_field "$1" 22) == "$2" ]]
}

# Waits up to SECS for PID to exit, on a pidfd (nginx is not our child: no wait(2)).
wait_exit() {  # PID SECS
    /usr/bin/python3 -c 'import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
select.select([fd], [], [], float(sys.argv[2]))' "$1" "$2" || true
}

stop_server() {
    [[ -f $dir/pid ]] || return 0
    local pid start
    read -r pid start <"$dir/pid"
    if running "$pid" "$start"; then
        log "stopping nginx (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true   # fast shutdown: the master ends its workers first
        wait_exit "$pid" "$STOP_TIMEOUT"
        if running "$pid" "$start"; then
            # The master leads its own session and process group (it daemonized): its group is
            # exactly it and its workers.
            log "nginx did not exit in ${STOP_TIMEOUT}s, SIGKILL to its process group"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
            wait_exit "$pid" 5
            running "$pid" "$start" && die "nginx (pid $pid) survived SIGKILL"
        fi
    fi
    rm -f "$dir/pid"
}

# --- start -------------------------------------------------------------------------------------

free_port() {  # a TCP port on 127.0.0.1 nobody listens on now
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

install_if_missing() {
    local missing=0 tool
    for tool in /usr/sbin/nginx openssl curl; do
        command -v "$tool" >/dev/null || missing=1
    done
    ((missing)) || return 0
    log "installing nginx-light openssl curl"
    export DEBIAN_FRONTEND=noninteractive
    local SUDO=''; [[ $(id -u) == 0 ]] || SUDO=sudo
    if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then $SUDO apt-get update >&2; fi
    $SUDO apt-get install -y --no-install-recommends nginx-light openssl curl >&2 ||
        { $SUDO apt-get update >&2 && $SUDO apt-get install -y --no-install-recommends nginx-light openssl curl >&2; }
}

# A test CA and a server certificate for 127.0.0.1 and localhost (EC P-256, valid 2 days).
make_certificates() {
    local t=$dir/tls
    mkdir -p "$t"
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=fidelityfs test CA" -keyout "$t/ca.key" -out "$t/ca.pem" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        >>"$dir/log/openssl.out" 2>&1 || die "openssl could not make the test CA (see $dir/log/openssl.out)"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$t/server.key" -out "$t/server.csr" >>"$dir/log/openssl.out" 2>&1 ||
        die "openssl could not make the server key (see $dir/log/openssl.out)"
    printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=CA:FALSE' \
        'keyUsage=critical,digitalSignature' 'extendedKeyUsage=serverAuth' >"$t/server.ext"
    openssl x509 -req -in "$t/server.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -set_serial "0x$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')" \
        -days 2 -extfile "$t/server.ext" -out "$t/server.pem" >>"$dir/log/openssl.out" 2>&1 ||
        die "openssl could not sign the server certificate (see $dir/log/openssl.out)"
    chmod 600 "$t/ca.key" "$t/server.key"
}

write_config() {  # PORT
    local listen="listen 127.0.0.1:$1;" tls_lines=''
    if ((tls)); then
        listen="listen 127.0.0.1:$1 ssl;"
        tls_lines="ssl_certificate $dir/tls/server.pem;
        ssl_certificate_key $dir/tls/server.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:fid_tls:1m;"
    fi
    # As root, workers would run as nobody and could not read a test's private tmp folder: keep
    # the invoking user (nginx warns and ignores `user` when not started as root).
    local user_line=''
    if [[ $(id -u) == 0 ]]; then user_line='user root root;'; fi
    local autoindex='autoindex off;'
    if ((json_index)); then autoindex='autoindex on; autoindex_format json;'; fi
    cat >"$dir/nginx.conf" <<EOF
$user_line
worker_processes 1;
pid $dir/run/nginx.pid;
error_log $dir/log/error.log warn;
events { worker_connections 1024; }
http {
    access_log $dir/log/access.log;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    types { }
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    etag on;
    keepalive_timeout 75s;
    keepalive_requests 100000;
    server_tokens off;
    server {
        $listen
        server_name 127.0.0.1 localhost;
        $tls_lines
        root $root;
        location / {
            limit_except GET { deny all; }   # GET implies HEAD; nothing else: read-only
            $autoindex
        }
    }
}
EOF
}

start() {
    install_if_missing
    if [[ -e $dir ]]; then
        [[ -e $dir/$MARKER ]] || die "$dir exists and is not ours; choose another DIR"
        if [[ -f $dir/pid ]]; then
            local pid st
            read -r pid st <"$dir/pid"
            running "$pid" "$st" && die "already running in $dir; stop it first: $0 stop $dir"
        fi
        rm -rf "$dir"   # a leftover of a failed start
    fi
    mkdir -p "$dir"/{run,log,tmp}
    touch "$dir/$MARKER"
    if [[ -z $root ]]; then root=$dir/www; mkdir -p "$root"; fi
    [[ -d $root ]] || die "$root is not a folder"
    if ((tls)); then make_certificates; fi

    local scheme=http port='' try
    if ((tls)); then scheme=https; fi
    for ((try = 1; try <= PORT_TRIES; try++)); do
        port=$(free_port)
        write_config "$port"
        # nginx daemonizes only after it has bound and is listening, so once this returns 0 the
        # port accepts connections (the workers answer them once started). -e: startup errors go
        # to our log, never to /var/log/nginx.
        if /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/log/error.log" \
            </dev/null >>"$dir/log/nginx.out" 2>&1; then
            break
        fi
        grep -q 'Address already in use' "$dir/log/error.log" "$dir/log/nginx.out" 2>/dev/null ||
            { tail -n 20 "$dir/log/error.log" "$dir/log/nginx.out" >&2 || true; die "nginx did not start"; }
        log "port $port was taken meanwhile; trying another"
        : >"$dir/log/error.log"
        port=''
    done
    [[ -n $port ]] || die "no free port after $PORT_TRIES tries"

    local url=$scheme://127.0.0.1:$port
    local -a curl_tls=()
    if ((tls)); then curl_tls=(--cacert "$dir/tls/ca.pem"); fi
    # The listener is up: the first answer needs only a worker; bounded anyway.
    local code
    code=$(curl -sS -o /dev/null -w '%{http_code}' "${curl_tls[@]}" --max-time "$START_TIMEOUT" \
        --retry-connrefused --retry 3 --retry-max-time "$START_TIMEOUT" "$url/" 2>>"$dir/log/curl.out" || true)
    # The master writes its pid file before it starts the workers, so it exists by now.
    local pid=''
    [[ -s $dir/run/nginx.pid ]] && read -r pid <"$dir/run/nginx.pid"
    [[ -n $pid ]] || die "nginx wrote no pid file (see $dir/log/error.log)"
    echo "$pid $(stat_field "$pid" 22)" >"$dir/pid"
    if [[ $code == 000 || -z $code ]]; then
        tail -n 20 "$dir/log/error.log" "$dir/log/curl.out" >&2 || true
        stop_server
        die "nginx did not answer on $url within ${START_TIMEOUT}s; left $dir for inspection"
    fi

    {
        echo "export FIDELITYFS_HTTP_URL=$url"
        echo "export FIDELITYFS_HTTP_ROOT=$(printf '%q' "$root")"
        if ((tls)); then echo "export FIDELITYFS_HTTP_CA=$dir/tls/ca.pem"; fi
    } >"$dir/env"
    log "nginx (pid $pid) serving $root at $url"
    if ((tls)); then log "test CA: $dir/tls/ca.pem"; fi
    cat "$dir/env"
}

# --- restart -----------------------------------------------------------------------------------

# A server restart as clients see it: connections reset, refused while it is down, then the same
# URL answers again (same config, same port, same certificate).
restart() {
    [[ -e $dir/$MARKER && -f $dir/nginx.conf ]] || die "$dir is not a running http-server.sh folder"
    stop_server
    /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/log/error.log" </dev/null >>"$dir/log/nginx.out" 2>&1 ||
        { tail -n 20 "$dir/log/error.log" >&2 || true; die "nginx did not start again"; }
    local pid=''
    [[ -s $dir/run/nginx.pid ]] && read -r pid <"$dir/run/nginx.pid"
    [[ -n $pid ]] || die "nginx wrote no pid file (see $dir/log/error.log)"
    echo "$pid $(stat_field "$pid" 22)" >"$dir/pid"
    log "nginx restarted (pid $pid)"
}

# --- stop --------------------------------------------------------------------------------------

stop() {
    [[ -e $dir ]] || { log "nothing at $dir"; return 0; }
    [[ -e $dir/$MARKER ]] || die "$dir is not a directory http-server.sh made; not touching it"
    stop_server
    rm -rf "$dir"
    log "stopped, removed $dir"
}

case $cmd in
    start) start ;;
    restart) restart ;;
    stop) stop ;;
    *) usage ;;
esac
