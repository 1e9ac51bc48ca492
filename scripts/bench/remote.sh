#!/usr/bin/env bash
# Cold epochs from object storage over an emulated link: fidelityfs mounting a packed store from
# S3 against s3fs and rclone mounting the raw ImageFolder from the same server, same run, same
# reader (readbench, THREADS threads), same link, every run cold.
#
# Everything runs in a network namespace this script makes (it re-executes itself under
# `ip netns exec`): a throwaway Ceph RGW (scripts/s3-server.sh) on its loopback, and in front of it
# tests/integration/fault_proxy.py adding RTT_MS to every request (this kernel has no tc netem).
# Every client (fidelityfs, s3fs, rclone) talks to the proxy. Bandwidth: a tc tbf of TBF_MBIT on
# the namespace's loopback, which every body byte crosses twice through the proxy (RGW -> proxy ->
# client). What the link achieves end to end is measured in the same run (single GETs of a 128 MiB
# object through the proxy, curl) and that measured figure is the "link bandwidth" of the goals.
#
# Per kind (imagenet: 25 KB JPEGs; imagenet-sized: 107 KB), each run cold (a fresh mount, page
# cache dropped; fidelityfs keeps its index cache, never record data: no disk_cache; s3fs without
# use_cache; rclone with --vfs-cache-mode off):
#   fid random        fidelityfs at full level, every file in a random order (seed = run)
#   fid order full/L5/L1  fidelityfs at full level, 5, 1, its published order .fidelity/order/epoch-RUN
#   s3fs random       s3fs 1.90, the first PEER_FILES files of the same random order
#   rclone random     rclone mount (S3 remote, provider Ceph), the same PEER_FILES files
#   4 nodes, ranks    four fidelityfs mounts at full level reading epoch-RUN.rank-R-of-4 together,
#                     THREADS/4 reader threads each
#   4 nodes, random quarters   four mounts each reading a disjoint random quarter (DistributedSampler
#                     with shuffle over the ImageFolder: nodes without rank orders), random order
# Contenders take turns within a run (a different one first each run); figures are medians of RUNS.
# Fetched bytes: fidelityfs's .fidelity/stats storage_bytes; for s3fs and rclone the response body
# bytes the proxy forwarded (its bytes_out; also shown for fidelityfs as a check). Requests: the
# proxy's counts after the mount (so a peer's HEAD/LIST per lookup counts), GETs and all requests.
# RSS: the peak (VmHWM) of the daemon (fidelityfs, s3fs, rclone).
# Needs root (network namespace, tc, drop_caches, mounts).
#   scripts/bench/remote.sh [COUNT=5000] [RUNS=3] [KINDS=imagenet] [PARTS=cold,epochs]
#     (KINDS: imagenet,imagenet-sized; PARTS: cold, epochs or both)
#   env: TBF_MBIT=800 RTT_MS=20 THREADS=8 PEER_FILES=1000 CACHE=256MiB LAYOUT=scan|file
#        EPOCH_UNITS="fid random,ext4" (the epochs part's contenders to run; all by default; the
#        goals of contenders not run are not printed)
source "$(dirname "$0")/common.sh"
count=${1:-5000}
runs=${2:-3}
kinds=${3:-imagenet}
parts=${4:-cold,epochs}
tbf_mbit=${TBF_MBIT:-800}
rtt_ms=${RTT_MS:-20}
threads=${THREADS:-8}
peer_files=${PEER_FILES:-1000}
cache=${CACHE:-256MiB}
[[ $EUID == 0 ]] || { echo "remote.sh: needs root (network namespace, tc, drop_caches, mounts)" >&2; exit 2; }
rb=$root/build/scripts/bench/readbench
work=$BENCH_DIR/remote
# LAYOUT=file: the store packed with --layout file (the same files and records, each JPEG's levels
# back to back); the peers read the same raw tree either way.
layout=${LAYOUT:-scan}
layout_suffix=${layout/#scan/}
[[ -z $layout_suffix ]] || layout_suffix=-$layout_suffix

# ---- outside the namespace: build, datasets, stores; then the namespace ------------------------
if [[ -z ${FIDBENCH_INNER:-} ]]; then
  BUILD_TARGETS="fidelityfs readbench" bench_setup
  for kind in ${kinds//,/ }; do
    src=$(make_dataset "$kind" "$count" 20)
    store=$BENCH_DIR/remote-store-$kind-$count$layout_suffix
    [[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --layout "$layout" --progress off --jobs 2 >/dev/null
  done
  run_in_netns "fidbench-$$" "$root/scripts/bench/remote.sh" "$@"
fi

# ---- inside the namespace ----------------------------------------------------------------------
ns=$FIDBENCH_INNER
rm -rf "$work"
mkdir -p "$work"/{mnt,s3fs,rclone,n0,n1,n2,n3,lists,stats} "$BENCH_DIR/results"
s3dir=$work/s3
proxy_pid=''
# Unmounting ends the daemons (fidelityfs, s3fs and rclone exit once unmounted); the runs happen in
# command substitutions, so their pids are not known here.
cleanup() {
  local m
  for m in "$work"/{mnt,s3fs,rclone,n0,n1,n2,n3}; do
    if mountpoint -q "$m"; then fusermount3 -u "$m" 2>/dev/null || umount -l "$m" || true; fi
  done
  if [[ -n $proxy_pid ]]; then kill "$proxy_pid" 2>/dev/null || true; fi
  "$root/scripts/s3-server.sh" stop "$s3dir" || true
}
trap cleanup EXIT

# Room for every kind's raw tree and store, and the link test object, in the OSD's RAM.
need=$((256 << 20))
for kind in ${kinds//,/ }; do
  need=$((need + 2 * $(du -sb "$(make_dataset "$kind" "$count" 20)" | cut -f1) + (64 << 20)))
done
eval "$(FIDELITYFS_S3_MEMSTORE_BYTES=$need "$root/scripts/s3-server.sh" start "$s3dir")"
rgw=$AWS_ENDPOINT_URL
s3() { aws --endpoint-url "$rgw" s3 "$@"; }
bucket=fidbench
s3 mb "s3://$bucket" >&2
t0=$(now)
for kind in ${kinds//,/ }; do
  src=$(make_dataset "$kind" "$count" 20)
  store=$BENCH_DIR/remote-store-$kind-$count$layout_suffix
  s3 cp --only-show-errors --recursive --exclude .done "$src" "s3://$bucket/raw-$kind"
  s3 cp --only-show-errors --recursive "$store/records" "s3://$bucket/store-$kind/records"
  s3 cp --only-show-errors "$store/index.sqlite" "s3://$bucket/store-$kind/index.sqlite"
done
head -c $((128 << 20)) /dev/urandom >"$work/link-test"
s3 cp --only-show-errors --acl public-read "$work/link-test" "s3://$bucket/link-test"
rm -f "$work/link-test"
printf 'uploaded in %.0f s\n' "$(echo "$(now) - $t0" | bc -l)" >&2

# The link: tbf on this namespace's loopback, the proxy adding RTT_MS to every request.
emulated_link "$rgw" "$tbf_mbit" "$rtt_ms" "$work/proxy.err"
pstats() { curl -sf "$purl/__fault__/stats"; }
preset() { curl -sf -X POST "$purl/__fault__/reset-stats" >/dev/null; }
# the proxy's counters: "bytes_out GET requests"
pcount() { pstats | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["bytes_out"], s["by_method"].get("GET", 0), s["requests"])'; }

link=()
for i in 1 2 3; do
  link+=("$(curl -sf -o /dev/null -w '%{speed_download}' "$purl/$bucket/link-test")")
done
link_bps=$(printf '%s\n' "${link[@]}" | median)
# RTT as a client sees it: a small request's time through the proxy
rtt_seen=$(curl -sf -o /dev/null -w '%{time_total}' "$purl/$bucket/link-test" -r 0-0)

export -n AWS_ENDPOINT_URL  # every client gets the proxy explicitly
hz=$(getconf CLK_TCK)

# shuffled SEED N -> the first N paths (relative) of a seeded random order of the tree
shuffled() {
  /usr/bin/python3 -c 'import random,sys; f=open(sys.argv[1]).read().split("\n")[:-1]; random.Random(int(sys.argv[2])).shuffle(f)
print("".join(p + "\n" for p in f[:int(sys.argv[3])]), end="")' "$work/lists/all.rel" "$1" "$2"
}
# read_list LIST [THREADS] -> readbench's JSON (the list in its order)
read_list() { timeout 600 "$rb" "$1" --threads "${2:-$threads}" --in-order; }

# fid_mount MNT LEVEL [OPTIONS] -> the daemon's pid
fid_mount() {
  "$bin" mount "s3://$bucket/store-$kind" "$1" -o "endpoint=$purl,scan_group=$2,cache=$cache${3:+,$3}"
  daemon_pid "$1" "s3://$bucket/store-$kind"
}
fid_umount() {  # MNT PID
  fusermount3 -u "$1"
  wait_exit "$2"
}

# Each run prints one line: "images/s served_bytes fetched_bytes proxy_bytes GETs requests rss_kb files"
run_fid() {  # LEVEL random|order RUN
  local level=$1 mode=$2 r=$3 m=$work/mnt pid out st
  pid=$(fid_mount "$m" "$level")
  if [[ $mode == order ]]; then
    sed "s|^|$m/|" "$m/.fidelity/order/epoch-$r" >"$work/lists/cur"
  else
    shuffled "$r" "$count" | sed "s|^|$m/|" >"$work/lists/cur"
  fi
  cold
  preset
  out=$(read_list "$work/lists/cur")
  read -r pb pg pr < <(pcount)
  st=$work/stats/fid-$level-$mode-$r.json
  cp "$m/.fidelity/stats" "$st"
  local rss
  rss=$(kb "$pid" VmHWM)
  errors "fidelityfs $level $mode run $r" "$out"
  fid_umount "$m" "$pid"
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $(json_get "$st" storage_bytes) $pb $pg $pr $rss $(field "$out" files)"
}

# s3fs -f and rclone mount say nothing when their mount is up (unlike fidelityfs mount, which
# returns then): wait for the mount table to change (findmnt --poll), checking after each change.
# A change between the check and findmnt's start is caught by findmnt's 1 s limit.
wait_mounted() {  # MNT PID: until MNT is a mount point (30 s), or the daemon died
  local deadline=$((SECONDS + 30))
  until mountpoint -q "$1"; do
    kill -0 "$2" 2>/dev/null || { echo "remote.sh: the daemon for $1 exited" >&2; return 1; }
    ((SECONDS < deadline)) || { echo "remote.sh: $1 not mounted after 30 s" >&2; return 1; }
    findmnt --poll=mount --first-only --timeout 1000 >/dev/null || true
  done
}

run_peer() {  # s3fs|rclone RUN [CACHE_DIR]: with CACHE_DIR, the peer's disk cache on, kept there
  local peer=$1 r=$2 cdir=${3:-} m=$work/$1 out
  if [[ $peer == s3fs ]]; then
    printf '%s:%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$work/s3fs.passwd"
    chmod 600 "$work/s3fs.passwd"
    s3fs "$bucket:/raw-$kind" "$m" -f -o "ro,url=$purl,use_path_request_style,passwd_file=$work/s3fs.passwd${cdir:+,use_cache=$cdir}" \
      >>"$work/s3fs.log" 2>&1 &
  else
    # (AWS_CA_BUNDLE, when the environment sets one, makes rclone's S3 client fail: "unable to
    # load custom CA bundle, HTTPClient's transport unsupported type"; the endpoint is plain http)
    env -u AWS_CA_BUNDLE RCLONE_CONFIG_FIDRGW_TYPE=s3 RCLONE_CONFIG_FIDRGW_PROVIDER=Ceph RCLONE_CONFIG_FIDRGW_ENV_AUTH=false \
      RCLONE_CONFIG_FIDRGW_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID RCLONE_CONFIG_FIDRGW_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
      RCLONE_CONFIG_FIDRGW_ENDPOINT=$purl RCLONE_CONFIG_FIDRGW_REGION=us-east-1 \
      rclone mount "fidrgw:$bucket/raw-$kind" "$m" --read-only \
      $([[ -n $cdir ]] && echo "--vfs-cache-mode full --cache-dir $cdir" || echo "--vfs-cache-mode off") >>"$work/rclone.log" 2>&1 &
  fi
  peer_pid=$!
  wait_mounted "$m" "$peer_pid"
  shuffled "$r" "$peer_files" | sed "s|^|$m/|" >"$work/lists/cur"
  cold
  preset
  out=$(read_list "$work/lists/cur")
  read -r pb pg pr < <(pcount)
  local rss
  rss=$(kb "$peer_pid" VmHWM 2>/dev/null) || rss=0
  errors "$peer run $r" "$out"
  fusermount3 -u "$m" 2>/dev/null || fusermount -u "$m"
  wait_exit "$peer_pid"
  kill "$peer_pid" 2>/dev/null || true
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $pb $pb $pg $pr ${rss:-0} $(field "$out" files)"
}

# run_nodes ranks|quarters RUN -> "images/s served storage proxy GETs requests rss_max files": four
# mounts at full level read together; images/s: all files over the slowest node's time.
# read_nodes LABEL PID...: the four mounts n0..n3 (daemons PID...) read their lists $work/lists/nR
# together from a dropped page cache, then are unmounted -> "images/s served storage proxy GETs
# requests rss_max files"; images/s: all files over the slowest node's time. Each node's stats are
# kept as $work/stats/LABEL-R.json.
read_nodes() {
  local label=$1 R rpids=() t=$(((threads + 3) / 4)) files=0 served=0 storage=0 secs=0 rss=0 o k
  shift
  local pids=("$@")
  cold
  preset
  for R in 0 1 2 3; do
    read_list "$work/lists/n$R" "$t" >"$work/lists/n$R.out" &
    rpids+=($!)
  done
  for p in "${rpids[@]}"; do wait "$p"; done
  read -r pb pg pr < <(pcount)
  for R in 0 1 2 3; do
    o=$(cat "$work/lists/n$R.out")
    errors "$label node $R" "$o"
    files=$((files + $(field "$o" files)))
    served=$((served + $(field "$o" bytes)))
    secs=$(echo "s = $(field "$o" seconds); if (s > $secs) s else $secs" | bc -l)
    cp "$work/n$R/.fidelity/stats" "$work/stats/$label-$R.json"
    storage=$((storage + $(json_get "$work/stats/$label-$R.json" storage_bytes)))
    k=$(kb "${pids[$R]}" VmHWM)
    ((k > rss)) && rss=$k
  done
  for R in 0 1 2 3; do fid_umount "$work/n$R" "${pids[$R]}"; done
  echo "$(echo "$files / $secs" | bc -l) $served $storage $pb $pg $pr $rss $files"
}

run_nodes() {
  local mode=$1 r=$2 R m pids=()
  for R in 0 1 2 3; do pids+=("$(fid_mount "$work/n$R" full)"); done
  for R in 0 1 2 3; do
    m=$work/n$R
    if [[ $mode == ranks ]]; then
      sed "s|^|$m/|" "$m/.fidelity/order/epoch-$r.rank-$R-of-4" >"$work/lists/n$R"
    else  # DistributedSampler(shuffle=True): a seeded permutation, rank R takes every 4th from R
      shuffled "$r" "$count" | awk -v R="$R" '(NR - 1) % 4 == R' | sed "s|^|$m/|" >"$work/lists/n$R"
    fi
  done
  read_nodes "nodes-$mode-$r" "${pids[@]}"
}

# errors WHAT JSON: notes readbench's read errors (printed after the tables)
errors() {
  local e
  e=$(field "$2" errors 2>/dev/null) || e='no result'
  [[ $e == 0 ]] || echo "$1: read errors: $e" >>"$work/errors"
}
# The runs' figures live in the calling part's associative array R: R[NAME,METRIC] = "v1 v2 ...".
keep() {  # NAME "images/s served fetched proxy GETs requests rss files [mode [daemon CPU us/image]]": one run's figures
  local a b c d e f g h mode cpu kv
  read -r a b c d e f g h mode cpu <<<"$2"
  for kv in "fps $a" "served $b" "fetched $c" "proxy $d" "gets $e" "reqs $f" "rss $g" "files $h" "mode ${mode:--}" "cpu ${cpu:--}"; do
    R[$1,${kv%% *}]+="${kv#* } "
  done
}
# per image: the median over runs of (metric / files)
per() {
  local -a v f
  read -ra v <<<"${R[$1,$2]}"
  read -ra f <<<"${R[$1,files]}"
  for i in "${!v[@]}"; do x "${v[$i]} / ${f[$i]}"; done | median
}
# the median over runs of metric A / metric B (A, B and both metrics named: common.sh's ratio
# takes one metric for both)
ratio() {
  local -a a b
  read -ra a <<<"${R[$1,$2]}"
  read -ra b <<<"${R[$3,$4]}"
  for i in "${!a[@]}"; do x "${a[$i]} / ${b[$i]}"; done | median
}

printf '\nremote benchmark: Ceph RGW (memstore) behind fault_proxy.py in a network namespace; link: tc tbf %d Mbit/s\n' \
  "$tbf_mbit"
printf 'on its loopback (crossed twice by every body byte through the proxy) + %d ms per request at the proxy\n' "$rtt_ms"
printf 'measured link: %.1f MB/s (%.0f Mbit/s; median of 3 single GETs of 128 MiB through the proxy, curl), request RTT %.1f ms\n' \
  "$(x "$link_bps / 1000000")" "$(x "$link_bps * 8 / 1000000")" "$(x "$rtt_seen * 1000")"
printf '%d reader threads (readbench), cold every run (fresh mount, page cache dropped, no disk cache), median of %d runs; %s layout\n' \
  "$threads" "$runs" "$layout"

# ---- cold: every run cold, no disk cache --------------------------------------------------------
cold_part() {
  declare -A R=()  # R[name,metric] = "v1 v2 ..." one value a run
  names=("fid random" "fid order full" "fid order L5" "fid order L1" "s3fs random" "rclone random" "4 nodes ranks"
         "4 nodes quarters")
  for ((r = 1; r <= runs; r++)); do
    for ((i = 0; i < ${#names[@]}; i++)); do
      name=${names[$(((i + r - 1) % ${#names[@]}))]}
      case $name in
        "fid random") line=$(run_fid full random "$r") ;;
        "fid order full") line=$(run_fid full order "$r") ;;
        "fid order L5") line=$(run_fid 5 order "$r") ;;
        "fid order L1") line=$(run_fid 1 order "$r") ;;
        "s3fs random") line=$(run_peer s3fs "$r") ;;
        "rclone random") line=$(run_peer rclone "$r") ;;
        "4 nodes ranks") line=$(run_nodes ranks "$r") ;;
        "4 nodes quarters") line=$(run_nodes quarters "$r") ;;
      esac
      keep "$name" "$line"
      echo "$kind run $r: $name: $line" >&2
    done
  done

  src_b=$(find "$src" -name '*.JPEG' -printf '%s\n' | awk '{s += $1} END {print s}')
  printf '\n%s: %d JPEGs (%.0f B on average, %.1f MB) in 20 classes; store: %d records, %.1f MB; s3fs and rclone read the first %d files of each run'"'"'s random order\n' \
    "$kind" "$n" "$(x "$src_b / $n")" "$(x "$src_b / 1000000")" "$nrec" "$(x "$record_bytes / 1000000")" "$peer_files"
  printf '%-17s %9s %14s %15s %9s %14s %10s %14s %11s\n' config images/s "served B/img" "fetched B/img" \
    "fetch/srv" "proxy B/img" "GETs/img" "requests/img" "daemon RSS"
  for name in "fid random" "fid order full" "fid order L5" "fid order L1" "s3fs random" "rclone random"; do
    printf '%-17s %9.0f %14.0f %15.0f %9.3f %14.0f %10.3f %14.3f %7d MiB\n' "$name" "$(med "$name" fps)" \
      "$(per "$name" served)" "$(per "$name" fetched)" "$(ratio "$name" fetched "$name" served)" "$(per "$name" proxy)" \
      "$(per "$name" gets)" "$(per "$name" reqs)" "$(($(tr ' ' '\n' <<<"${R[$name,rss]}" | grep . | sort -g | tail -1) / 1024))"
  done
  printf '(fetched: fidelityfs storage_bytes, the peers the proxy'"'"'s bytes_out; proxy B/img: bytes_out for all; daemon RSS: peak over runs)\n'
  printf '\nfour mounts as four nodes at full level, %d reader threads each, reading together (store records: %d B)\n' \
    "$(((threads + 3) / 4))" "$record_bytes"
  printf '%-17s %9s %16s %18s %14s\n' config images/s "fetched, all 4" "fetched / store" "GETs/img"
  for name in "4 nodes ranks" "4 nodes quarters"; do
    printf '%-17s %9.0f %16.0f %18.3f %14.3f\n' "$name" "$(med "$name" fps)" "$(med "$name" fetched)" \
      "$(x "$(med "$name" fetched) / $record_bytes")" "$(per "$name" gets)"
  done
  printf '(ranks: .fidelity/order/epoch-RUN.rank-R-of-4; quarters: each node a disjoint random quarter, random order)\n'

  printf '\ngoals (%s):\n' "$kind"
  fo=$(med "fid order full" fps)
  sb=$(per "fid order full" served)
  lim=$(x "$link_bps / $sb")
  printf 'goal: published order at full level >= 0.8 x link / served bytes per image: measured %.0f images/s = %.2f x (%.1f MB/s / %.0f B = %.0f images/s) -> %s\n' \
    "$fo" "$(x "$fo / $lim")" "$(x "$link_bps / 1000000")" "$sb" "$lim" "$(met "$fo >= 0.8 * $lim")"
  for f in "fid random" "fid order full"; do
    for p in "s3fs random" "rclone random"; do
      q=$(ratio "$f" fps "$p" fps)
      printf 'goal: >= 10x the images/s of %s: fidelityfs %s measured %.1fx (%.0f vs %.0f images/s) -> %s\n' "${p% random}" \
        "$([[ $f == "fid random" ]] && echo "random order" || echo "published order, full level")" "$q" "$(med "$f" fps)" \
        "$(med "$p" fps)" "$(met "$q >= 10")"
    done
  done
  for k in 5 1; do
    sp=$(ratio "fid order L$k" fps "fid order full" fps)
    br=$(ratio "fid order full" served "fid order L$k" served)
    printf 'goal: level %d over full >= 0.9 x byte ratio: measured %.2fx images/s for %.2fx fewer bytes = %.2f -> %s\n' \
      "$k" "$sp" "$br" "$(x "$sp / $br")" "$(met "$sp >= 0.9 * $br")"
  done
  for name in "fid order full" "fid order L5" "fid order L1"; do
    q=$(ratio "$name" fetched "$name" served)
    printf 'goal: fetched / served <= 1.05 in published order (%s): measured %.3f -> %s\n' "${name#fid order }" "$q" \
      "$(met "$q <= 1.05")"
  done
  q=$(ratio "fid random" fetched "fid random" served)
  printf 'goal: fetched / served <= 1.3 in random order: measured %.3f -> %s\n' "$q" "$(met "$q <= 1.3")"
  q=$(x "$(med "4 nodes ranks" fetched) / $record_bytes")
  printf 'goal: four nodes reading ranks 0-3 of 4 fetch together <= 1.05x the store: measured %.3fx -> %s (nodes each reading a random quarter: %.3fx; nodes each reading every record whole: 4x)\n' \
    "$q" "$(met "$q <= 1.05")" "$(x "$(med "4 nodes quarters" fetched) / $record_bytes")"

  {
    printf '{"kind": "%s", "files": %d, "runs": %d, "link_bps": %s, "tbf_mbit": %d, "rtt_ms": %s, "threads": %d, "peer_files": %d, "record_bytes": %s, "contenders": ' \
      "$kind" "$n" "$runs" "$link_bps" "$tbf_mbit" "$rtt_ms" "$threads" "$peer_files" "$record_bytes"
    runs_json names fps served fetched proxy gets reqs rss files
    printf '}\n'
  } >"$BENCH_DIR/results/remote-$kind-$count.json"
}

# ---- epochs: random order with a disk cache, epoch 0 then epoch 1, against peers with caches on --
# Per run, each contender cold at the start of each epoch (page cache dropped; epoch 1 a fresh mount
# on the same disk cache):
#   fid random e0/e1    fidelityfs, default random_reads (auto), disk_cache 2x the store: epoch 0 a
#                       random order of every file (seed RUN), epoch 1 another (seed RUN+500)
#   fid order e0        fidelityfs in its published order, epoch-RUN, on an empty disk cache
#   ext4 random e1      the source tree on local ext4, epoch 1's random order
#   s3fs/rclone e0/e1   s3fs use_cache=DIR, rclone --vfs-cache-mode full: the first PEER_FILES files of
#                       epoch 0's order, then the same files again on a fresh mount with the same cache
#   small dc auto/pieces  a disk cache of half the store: auto (which must keep pieces) against
#                       random_reads=pieces, the same PEER_FILES files
#   nodes stable/per-epoch e0/e1  four mounts as four nodes, each with its own disk cache of 1.2x a
#                       quarter of the store, reading rank orders epoch-2RUN.rank-R-of-4, then on fresh
#                       mounts epoch-(2RUN+1); order_ranks=stable (the default) or per-epoch
# Lines: "NAME|images/s served fetched proxy GETs requests rss files mode daemon-CPU-us/image".
fid_read() {  # NAME MNT LIST OPTIONS  (LIST: order:N or random:SEED:COUNT)
  local name=$1 m=$2 what=$3 opts=$4 pid out seed nfiles st rss t0 t1
  pid=$(fid_mount "$m" full "$opts")
  case $what in
    order:*) sed "s|^|$m/|" "$m/.fidelity/order/epoch-${what#order:}" ;;
    random:*) IFS=: read -r _ seed nfiles <<<"$what"; shuffled "$seed" "$nfiles" | sed "s|^|$m/|" ;;
  esac >"$work/lists/cur"
  cold
  preset
  t0=$(cpu_ticks "$pid")
  out=$(read_list "$work/lists/cur")
  t1=$(cpu_ticks "$pid")
  read -r pb pg pr < <(pcount)
  st=$work/stats/$kind-${name// /_}.json
  cp "$m/.fidelity/stats" "$st"
  rss=$(kb "$pid" VmHWM)
  errors "$name" "$out"
  fid_umount "$m" "$pid"
  echo "$name|$(field "$out" files_per_s) $(field "$out" bytes) $(json_get "$st" storage_bytes) $pb $pg $pr $rss $(field "$out" files) $(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["random_reads"]["mode"])' "$st") $(x "($t1 - $t0) * 1000000 / $hz / $(field "$out" files)")"
}

ext4_read() {  # NAME SEED
  local out
  shuffled "$2" "$count" | sed "s|^|$src/|" >"$work/lists/cur"
  cold
  out=$(read_list "$work/lists/cur")
  errors "$1" "$out"
  echo "$1|$(field "$out" files_per_s) $(field "$out" bytes) $(field "$out" read_bytes) 0 0 0 0 $(field "$out" files) - -"
}

peer_epochs() {  # PEER RUN
  local c=$work/$1-cache line
  rm -rf "$c" && mkdir -p "$c"
  line=$(run_peer "$1" "$2" "$c")
  echo "$1 e0|$line -"
  line=$(run_peer "$1" "$2" "$c")
  echo "$1 e1|$line -"
}

# nodes_epochs DEAL RUN: four mounts, each on its own disk cache, rank orders of two epochs.
nodes_epochs() {
  local deal=$1 r=$2 R e pids dcs=$((record_bytes * 12 / 40)) line
  for R in 0 1 2 3; do rm -rf "$work/ndc$R"; done
  for e in 0 1; do
    pids=()
    for R in 0 1 2 3; do
      pids+=("$(fid_mount "$work/n$R" full "disk_cache=$work/ndc$R,disk_cache_size=$dcs,order_ranks=$deal")")
    done
    for R in 0 1 2 3; do
      sed "s|^|$work/n$R/|" "$work/n$R/.fidelity/order/epoch-$((2 * r + e)).rank-$R-of-4" >"$work/lists/n$R"
    done
    line=$(read_nodes "nodes-$deal-e$e" "${pids[@]}")
    read -r a b c d f g _ h <<<"$line"
    echo "nodes $deal e$e|$a $b $c $d $f $g 0 $h -"
  done
}

# epochs_unit UNIT RUN: sets the caller's lines to one contender's "NAME|figures" lines in run RUN
# (not in $(...), so that a failed read stops the benchmark as set -e does here)
epochs_unit() {
  local u=$1 r=$2 dc=$work/dc big=$((2 * record_bytes)) small=$((record_bytes / 2))
  case $u in
    "fid random")
      rm -rf "$dc"
      lines=$(fid_read "fid random e0" "$work/mnt" "random:$r:$count" "disk_cache=$dc,disk_cache_size=$big"
              fid_read "fid random e1" "$work/mnt" "random:$((r + 500)):$count" "disk_cache=$dc,disk_cache_size=$big") ;;
    "fid order")
      rm -rf "$dc"
      lines=$(fid_read "fid order e0" "$work/mnt" "order:$r" "disk_cache=$dc,disk_cache_size=$big") ;;
    "ext4") lines=$(ext4_read "ext4 random e1" $((r + 500))) ;;
    "s3fs" | "rclone") lines=$(peer_epochs "$u" "$r") ;;
    "small dc")
      rm -rf "$dc"
      lines=$(fid_read "small dc auto" "$work/mnt" "random:$r:$peer_files" "disk_cache=$dc,disk_cache_size=$small")
      rm -rf "$dc"
      lines+=$'\n'$(fid_read "small dc pieces" "$work/mnt" "random:$r:$peer_files" \
                      "disk_cache=$dc,disk_cache_size=$small,random_reads=pieces") ;;
    "nodes stable") lines=$(nodes_epochs stable "$r") ;;
    "nodes per-epoch") lines=$(nodes_epochs per-epoch "$r") ;;
  esac
}

# the goals of the epochs part, from the calling part's R
epochs_goals() {
  printf '\ngoals (%s, epochs):\n' "$kind"
  local q
  if have "fid random e0" "fid order e0"; then
    q=$(ratio "fid random e0" fps "fid order e0" fps)
    printf 'goal: random epoch 0 >= 0.8x the published order: measured %.2fx (%.0f vs %.0f images/s) -> %s\n' "$q" \
      "$(med "fid random e0" fps)" "$(med "fid order e0" fps)" "$(met "$q >= 0.8")"
  fi
  if have "fid random e0"; then
    q=$(per "fid random e0" gets)
    printf 'goal: random epoch 0 <= 0.05 GETs an image: measured %.4f -> %s\n' "$q" "$(met "$q <= 0.05")"
    q=$(x "$(med "fid random e0" fetched) / $record_bytes")
    printf 'goal: random epoch 0 fetches <= 1.05x the store: measured %.3fx -> %s\n' "$q" "$(met "$q <= 1.05")"
    q=$(x "$(med "fid random e1" fetched) / $record_bytes")
    printf 'goal: random epoch 1 fetches <= 0.01x the store: measured %.4fx -> %s\n' "$q" "$(met "$q <= 0.01")"
  fi
  if have "fid random e1" "ext4 random e1"; then
    q=$(ratio "fid random e1" fps "ext4 random e1" fps)
    printf 'goal: random epoch 1 >= 1.0x ext4 in the same order: measured %.2fx (%.0f vs %.0f images/s) -> %s\n' "$q" \
      "$(med "fid random e1" fps)" "$(med "ext4 random e1" fps)" "$(met "$q >= 1.0")"
  fi
  for p in s3fs rclone; do
    have "fid random e0" "$p e0" || continue
    local want=10
    [[ $p == rclone ]] && want=3
    q=$(ratio "fid random e0" fps "$p e0" fps)
    printf 'goal: epoch 0 >= %dx %s with its cache on: measured %.1fx (%.0f vs %.0f images/s) -> %s\n' "$want" "$p" "$q" \
      "$(med "fid random e0" fps)" "$(med "$p e0" fps)" "$(met "$q >= $want")"
    q=$(ratio "fid random e1" fps "$p e1" fps)
    printf 'goal: epoch 1 >= 1.0x %s with its cache on: measured %.2fx (%.0f vs %.0f images/s) -> %s\n' "$p" "$q" \
      "$(med "fid random e1" fps)" "$(med "$p e1" fps)" "$(met "$q >= 1.0")"
  done
  if have "small dc auto" "small dc pieces"; then
    q=$(ratio "small dc auto" fps "small dc pieces" fps)
    printf 'goal: disk cache smaller than the store: auto keeps pieces (modes: %s) within 10%% of pieces: measured %.2fx -> %s\n' \
      "$(echo ${R["small dc auto",mode]})" "$q" "$(met "$q >= 0.9 && $q <= 1.1")"
  fi
  if have "nodes stable e1" "nodes per-epoch e1"; then
    q=$(x "$(med "nodes stable e1" fetched) / $record_bytes")
    printf 'goal: four nodes on rank orders fetch <= 0.05x the store in epoch 1: measured %.4fx -> %s (order_ranks=per-epoch: %.3fx)\n' \
      "$q" "$(met "$q <= 0.05")" "$(x "$(med "nodes per-epoch e1" fetched) / $record_bytes")"
  fi
}

# have NAME...: whether every contender named ran (EPOCH_UNITS may leave some out)
have() {
  local n
  for n; do [[ -n ${R[$n,fps]:-} ]] || return 1; done
}

epochs_part() {
  declare -A R=()
  local units=("fid random" "fid order" "ext4" "s3fs" "rclone" "small dc" "nodes stable" "nodes per-epoch")
  if [[ -n ${EPOCH_UNITS:-} ]]; then IFS=, read -ra units <<<"$EPOCH_UNITS"; fi
  local r i u lines name line
  for ((r = 1; r <= runs; r++)); do
    for ((i = 0; i < ${#units[@]}; i++)); do
      u=${units[$(((i + r - 1) % ${#units[@]}))]}
      epochs_unit "$u" "$r"
      while IFS='|' read -r name line; do
        [[ -n $name ]] || continue
        keep "$name" "$line"
        echo "$kind run $r: $name: $line" >&2
      done <<<"$lines"
    done
  done

  local names=("fid random e0" "fid random e1" "fid order e0" "ext4 random e1" "s3fs e0" "s3fs e1" "rclone e0" "rclone e1"
               "small dc auto" "small dc pieces" "nodes stable e0" "nodes stable e1" "nodes per-epoch e0"
               "nodes per-epoch e1")
  printf '\n%s, epochs: disk caches on; every epoch cold (page cache dropped; epoch 1 a fresh mount on the same cache); store records %d B\n' \
    "$kind" "$record_bytes"
  printf '%-19s %9s %14s %15s %15s %10s %8s %14s\n' config images/s "served B/img" "fetched B/img" "fetched/store" GETs/img mode \
    "daemon us/img"
  local cpu
  for name in "${names[@]}"; do
    have "$name" || continue
    cpu=$(tr ' ' '\n' <<<"${R[$name,cpu]}" | { grep -v '^-\?$' || true; })  # none for ext4 and the peers
    [[ -z $cpu ]] || cpu=$(median <<<"$cpu")
    printf '%-19s %9.0f %14.0f %15.0f %15.4f %10.4f %8s %14s\n' "$name" "$(med "$name" fps)" "$(per "$name" served)" \
      "$(per "$name" fetched)" "$(x "$(med "$name" fetched) / $record_bytes")" "$(per "$name" gets)" \
      "$(tr ' ' '\n' <<<"${R[$name,mode]}" | grep . | sort | uniq -c | awk '{printf "%s%s", (NR > 1 ? "," : ""), $2}')" \
      "$([[ -n $cpu ]] && printf '%.0f' "$cpu" || echo -)"
  done
  printf '(fetched: fidelityfs storage_bytes, the peers the proxy'"'"'s bytes_out, ext4 the reader'"'"'s read_bytes; s3fs, rclone and small dc read the first %d files of epoch 0'"'"'s order)\n' \
    "$peer_files"

  epochs_goals

  {
    printf '{"kind": "%s", "part": "epochs", "files": %d, "runs": %d, "link_bps": %s, "threads": %d, "peer_files": %d, "record_bytes": %s, "contenders": ' \
      "$kind" "$n" "$runs" "$link_bps" "$threads" "$peer_files" "$record_bytes"
    runs_json names fps served fetched proxy gets reqs files
    printf '}\n'
  } >"$BENCH_DIR/results/remote-epochs-$kind-$count.json"
}

for kind in ${kinds//,/ }; do
  src=$(make_dataset "$kind" "$count" 20)
  store=$BENCH_DIR/remote-store-$kind-$count$layout_suffix
  (cd "$src" && find . -name '*.JPEG' | sort | sed 's|^\./||') >"$work/lists/all.rel"
  n=$(wc -l <"$work/lists/all.rel")
  ((peer_files > n)) && peer_files=$n
  record_bytes=$(find "$store/records" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
  nrec=$(find "$store/records" -type f | wc -l)
  if [[ ,$parts, == *,cold,* ]]; then cold_part; fi
  if [[ ,$parts, == *,epochs,* ]]; then epochs_part; fi
done
if [[ -s $work/errors ]]; then printf '\nREAD ERRORS:\n'; cat "$work/errors"; fi
