#!/usr/bin/env bash
# Packing from and to object storage over the remote bench's link (scripts/bench/remote.sh: a Ceph
# RGW in a network namespace this script makes, behind tests/integration/fault_proxy.py adding
# RTT_MS to every request, a tc tbf of TBF_MBIT on the namespace's loopback), against a local pack
# of the same tree, same run, same --jobs:
#   local     pack FOLDER STORE               (page cache dropped first)
#   from s3   pack s3://BUCKET/raw STORE      (the same tree, uploaded once with awscli)
#   to s3     pack FOLDER s3://BUCKET/out-RUN (page cache dropped first)
# The link's own speed is measured in the same run: single GETs and single PUTs (curl, SigV4) of a
# 128 MiB object through the proxy. Per contender: files/s, source or store MB/s, that rate as a
# fraction of the link, the pack's CPU use (user + system over wall time, in cores), the whole
# machine's busy fraction (the server and the proxy run on the same cores) and the pack's peak RSS.
# The goal (issue 27): at least 0.8x the link, or CPU-bound at the same files/s as the local pack,
# whichever binds. Contenders take turns (a different one first each run); figures are medians.
# Needs root (network namespace, tc, drop_caches).
#   scripts/bench/pack_s3.sh [COUNT=2000] [RUNS=3] [KIND=imagenet-sized]
#   env: TBF_MBIT=800 RTT_MS=20 JOBS=2
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-3}
kind=${3:-imagenet-sized}
tbf_mbit=${TBF_MBIT:-800}
rtt_ms=${RTT_MS:-20}
jobs=${JOBS:-2}
[[ $EUID == 0 ]] || { echo "pack_s3.sh: needs root (network namespace, tc, drop_caches)" >&2; exit 2; }
work=$BENCH_DIR/pack-s3

if [[ -z ${FIDBENCH_INNER:-} ]]; then
  BUILD_TARGETS="fidelityfs" bench_setup
  make_dataset "$kind" "$count" 20 >/dev/null
  run_in_netns "fidbench-$$" "$root/scripts/bench/pack_s3.sh" "$@"
fi

# ---- inside the namespace ----------------------------------------------------------------------
src=$(make_dataset "$kind" "$count" 20)
rm -rf "$work"
mkdir -p "$work"
s3dir=$work/s3
proxy_pid=''
cleanup() {
  if [[ -n $proxy_pid ]]; then kill "$proxy_pid" 2>/dev/null || true; fi
  "$root/scripts/s3-server.sh" stop "$s3dir" || true
}
trap cleanup EXIT

src_bytes=$(du -sb --exclude .done "$src" | cut -f1)
# Room for the raw tree, one store per run and the link test object in the OSD's RAM.
need=$(((256 << 20) + (runs + 2) * 2 * src_bytes))
eval "$(FIDELITYFS_S3_MEMSTORE_BYTES=$need "$root/scripts/s3-server.sh" start "$s3dir")"
rgw=$AWS_ENDPOINT_URL
s3() { aws --endpoint-url "$rgw" s3 "$@"; }
bucket=fidbench
s3 mb "s3://$bucket" >&2
s3 cp --only-show-errors --recursive --exclude .done "$src" "s3://$bucket/raw"
head -c $((128 << 20)) /dev/urandom >"$work/link-test"

# The link: tbf on this namespace's loopback, the proxy adding RTT_MS to every request.
emulated_link "$rgw" "$tbf_mbit" "$rtt_ms" "$work/proxy.err"
export AWS_ENDPOINT_URL=$purl  # every fidelityfs request goes through the link

# (RGW wants x-amz-content-sha256, which curl does not send by itself)
sigv4=(--aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY"
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
down=() up=()
for i in 1 2 3; do
  up+=("$(curl -sf "${sigv4[@]}" -T "$work/link-test" -o /dev/null -w '%{speed_upload}' "$purl/$bucket/link-test")")
  down+=("$(curl -sf "${sigv4[@]}" -o /dev/null -w '%{speed_download}' "$purl/$bucket/link-test")")
done
rm -f "$work/link-test"
down_bps=$(printf '%s\n' "${down[@]}" | median)
up_bps=$(printf '%s\n' "${up[@]}" | median)

# cpu_times: "busy total" jiffies of the whole machine (the pack, RGW and the proxy share it)
cpu_times() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }
# run NAME SRC STORE -> "files/s moved_bytes cpu_cores rss_kb seconds files machine_busy"
run() {
  local name=$1 from=$2 to=$3 out t
  [[ $to == s3://* ]] || rm -rf "$to"
  cold
  local b0 t0 b1 t1
  read -r b0 t0 < <(cpu_times)
  out=$(/usr/bin/time -f 'TIME %e %U %S %M' "$bin" pack "$from" "$to" --progress off --jobs "$jobs" 2>&1) ||
    { echo "pack_s3.sh: $name failed: $out" >&2; exit 1; }
  read -r b1 t1 < <(cpu_times)
  local files secs
  files=$(sed -n 's/^packed \([0-9]*\) files.*/\1/p' <<<"$out")
  local store_mb
  store_mb=$(sed -n 's/^source [0-9.]* MB, store \([0-9.]*\) MB.*/\1/p' <<<"$out")
  read -r _ secs usr sys rss < <(grep '^TIME ' <<<"$out")
  local moved=$src_bytes
  [[ $name == to_s3 ]] && moved=$(x "$store_mb * 1000000")
  echo "$(x "$files / $secs") $moved $(x "($usr + $sys) / $secs") $rss $secs $files $(x "($b1 - $b0) / ($t1 - $t0)")"
}
declare -A R
names=(local from_s3 to_s3)
for ((r = 0; r < runs; r++)); do
  for ((k = 0; k < 3; k++)); do
    name=${names[$(((r + k) % 3))]}
    case $name in
      local) line=$(run local "$src" "$work/store-local") ;;
      from_s3) line=$(run from_s3 "s3://$bucket/raw" "$work/store-from-s3") ;;
      to_s3) line=$(run to_s3 "$src" "s3://$bucket/out-$r") ;;
    esac
    read -r fps moved cores rss secs files busy <<<"$line"
    R[$name,fps]+="$fps " R[$name,mbps]+="$(x "$moved / $secs") " R[$name,cores]+="$cores " R[$name,rss]+="$rss "
    R[$name,busy]+="$busy "
    echo "run $r $name: $fps files/s, $(x "$moved / $secs / 1000000") MB/s, $cores cores, $files files" >&2
  done
done

printf '\npack from and to S3: Ceph RGW (memstore) behind fault_proxy.py, tc tbf %d Mbit/s, +%d ms per request\n' \
  "$tbf_mbit" "$rtt_ms"
printf '%d %s files (%.1f MB), --jobs %d, %d runs (medians); link: GET %.1f MB/s, PUT %.1f MB/s\n\n' "$count" "$kind" \
  "$(x "$src_bytes / 1000000")" "$jobs" "$runs" "$(x "$down_bps / 1000000")" "$(x "$up_bps / 1000000")"
printf '%-10s %10s %10s %12s %8s %13s %10s %10s\n' contender files/s MB/s "of the link" cores "machine busy" "RSS MiB" \
  "vs local"
lf=$(med local fps)
for name in "${names[@]}"; do
  link=-
  [[ $name == from_s3 ]] && link=$(printf '%.3f' "$(x "$(med $name mbps) / $down_bps")")
  [[ $name == to_s3 ]] && link=$(printf '%.3f' "$(x "$(med $name mbps) / $up_bps")")
  printf '%-10s %10.1f %10.2f %12s %8.2f %13.2f %10.0f %9.3fx\n' "$name" "$(med "$name" fps)" \
    "$(x "$(med "$name" mbps) / 1000000")" "$link" "$(med "$name" cores)" "$(med "$name" busy)" \
    "$(x "$(med "$name" rss) / 1024")" "$(x "$(med "$name" fps) / $lf")"
done
echo
for name in from_s3 to_s3; do
  bps=$down_bps
  [[ $name == to_s3 ]] && bps=$up_bps
  of_link=$(x "$(med $name mbps) / $bps")
  vs_local=$(x "$(med $name fps) / $lf")
  # The machine's cores all busy (pack + RGW + proxy): the CPU binds; else the link.
  binds=link
  (($(echo "$(med $name busy) >= 0.9" | bc -l))) && binds="CPU (pack, RGW and proxy share the cores)"
  printf '%s: binds: %s; goal (>= 0.8x the link, or >= 0.95x the local files/s when CPU binds): %s\n' "$name" "$binds" \
    "$(met "$of_link >= 0.8 || $vs_local >= 0.95")"
done
