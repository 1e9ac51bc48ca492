#!/usr/bin/env bash
# Video clips from object storage: clips/s and GETs per clip of a clip loader
# (scripts/bench/clip_reader.py: READERS readers, clips in a seeded random order, each clip's
# frames in name order) over s3:// mounts of one clip set, every run cold (a fresh mount, page
# cache dropped). Contenders, on the same clips in the same order, each mount with cache=CACHE
# (default 32MiB: a store bigger than the cache, so no record is loaded whole):
#   per-frame  the set packed with --clips off (frames scattered over records as any file: a GET a
#              frame), at full: the baseline;
#   full, L5   the set packed with clips (pack's default, file layout) at full and at level 5: a
#              clip's first miss reads its run at the level, one ranged GET.
# As remote.sh: everything in a network namespace this script makes, a throwaway Ceph RGW
# (scripts/s3-server.sh) on its loopback, tests/integration/fault_proxy.py adding RTT_MS to every
# request and counting them, a tc tbf of TBF_MBIT on the loopback (every body byte crosses it
# twice). The set: Kinetics-like (CLIPS clips x 64 frames, 340x256, scripts/bench/make_clips.py).
# Prints clips/s, the ratios and GETs per clip (the proxy's count over the clips read).
# Needs root (network namespace, tc, drop_caches, mounts).
#   scripts/bench/clips_s3.sh [RUNS=3] [SECONDS=20]
#   env: CLIPS=100 KIND=kinetics TBF_MBIT=800 RTT_MS=20 READERS=4 CACHE=32MiB
source "$(dirname "$0")/common.sh"
runs=${1:-3}
seconds=${2:-20}
clips=${CLIPS:-100}
kind=${KIND:-kinetics}
frames_per_clip=$([[ $kind == jester ]] && echo 36 || echo 64)
tbf_mbit=${TBF_MBIT:-800}
rtt_ms=${RTT_MS:-20}
readers=${READERS:-4}
cache=${CACHE:-32MiB}
[[ $EUID == 0 ]] || { echo "clips_s3.sh: needs root (network namespace, tc, drop_caches, mounts)" >&2; exit 2; }
reader=$root/scripts/bench/clip_reader.py
set_dir=$BENCH_DIR/clips-$kind-${clips}x$frames_per_clip  # clips.sh's set, made the same way

# ---- outside the namespace: build, the set and its two stores; then the namespace ---------------
if [[ -z ${FIDBENCH_INNER:-} ]]; then
  BUILD_TARGETS=fidelityfs bench_setup
  if [[ ! -f $set_dir/.done ]]; then
    rm -rf "$set_dir"
    /usr/bin/python3 "$root/scripts/bench/make_clips.py" --kind "$kind" --clips "$clips" --frames "$frames_per_clip" \
      --out "$set_dir/src" >&2
    (cd "$set_dir/src" && find . -type f | sed 's|^\./||; s|/[^/]*$||' | sort -u) >"$set_dir/list"
    "$bin" pack "$set_dir/src" "$set_dir/store" --progress off >/dev/null
    touch "$set_dir/.done"
  fi
  [[ -f $set_dir/store-noclips/index.sqlite ]] ||
    "$bin" pack "$set_dir/src" "$set_dir/store-noclips" --clips off --progress off >/dev/null
  run_in_netns "fidclips-$$" "$root/scripts/bench/clips_s3.sh" "$@"
fi

# ---- inside the namespace ----------------------------------------------------------------------
work=$BENCH_DIR/clips-s3
rm -rf "$work"
mkdir -p "$work/mnt"
s3dir=$work/s3
proxy_pid=''
cleanup() {
  if mountpoint -q "$work/mnt"; then fusermount3 -u "$work/mnt" 2>/dev/null || umount -l "$work/mnt" || true; fi
  if [[ -n $proxy_pid ]]; then kill "$proxy_pid" 2>/dev/null || true; fi
  "$root/scripts/s3-server.sh" stop "$s3dir" || true
}
trap cleanup EXIT

need=$(((256 << 20) + 2 * $(du -sbc "$set_dir"/store{,-noclips} | tail -1 | cut -f1)))
eval "$(FIDELITYFS_S3_MEMSTORE_BYTES=$need "$root/scripts/s3-server.sh" start "$s3dir")"
rgw=$AWS_ENDPOINT_URL
bucket=fidclips
aws --endpoint-url "$rgw" s3 mb "s3://$bucket" >&2
for store in store store-noclips; do
  aws --endpoint-url "$rgw" s3 cp --only-show-errors --recursive "$set_dir/$store" "s3://$bucket/$store"
done

# The link: tbf on this namespace's loopback, the proxy adding RTT_MS to every request.
emulated_link "$rgw" "$tbf_mbit" "$rtt_ms" "$work/proxy.err"
gets() { curl -sf "$purl/__fault__/stats" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["by_method"].get("GET", 0))'; }
export -n AWS_ENDPOINT_URL

# run CONTENDER RUN: prints "clips/s GETs/clip"
run() {
  local what=$1 r=$2 m=$work/mnt store=store level=full out g0 pid
  [[ $what == per-frame ]] && store=store-noclips
  [[ $what == L5 ]] && level=5
  "$bin" mount "s3://$bucket/$store" "$m" -o "endpoint=$purl,scan_group=$level,cache=$cache"
  pid=$(daemon_pid "$m" "s3://$bucket/$store")
  cold
  g0=$(gets)
  out=$(/usr/bin/python3 "$reader" frames "$m" "$set_dir/list" --seed "$r" --seconds "$seconds" --threads "$readers")
  cat "$m/.fidelity/stats" >"$work/$what.stats.json"  # one open (cp fails if the stats change meanwhile)
  fusermount3 -u "$m"
  wait_exit "$pid"
  echo "$(field "$out" clips_per_s) $(x "($(gets) - $g0) / $(field "$out" clips)")"
}

contenders=("per-frame" "full" "L5")
declare -A R=()
for ((r = 0; r < runs; r++)); do
  for ((i = 0; i < ${#contenders[@]}; i++)); do  # a different contender first each run
    c=${contenders[$(((i + r) % ${#contenders[@]}))]}
    read -r cps gpc < <(run "$c" "$r")
    R[$c,fps]+=" $cps"
    R[$c,gpc]+=" $gpc"
  done
done
printf '\n## %s clips over s3:// (%s), RGW behind a %s Mbit/s link with %s ms a request, cache=%s, cold, %s readers, median of %s\n\n' \
  "$kind" "$(basename "$set_dir")" "$tbf_mbit" "$rtt_ms" "$cache" "$readers" "$runs"
printf '| contender | clips/s | vs per-frame | vs full | GETs/clip |\n| --- | ---: | ---: | ---: | ---: |\n'
for c in "${contenders[@]}"; do
  printf '| %s | %.1f | %.2fx | %.2fx | %.2f |\n' "$c" "$(med "$c" fps)" "$(ratio "$c" per-frame)" "$(ratio "$c" full)" "$(med "$c" gpc)"
done
printf '\ngoals: GETs per clip <= 1.1: %s (full %.2f, L5 %.2f); full >= 10x per-frame: %s (%.1fx); L5 >= 1.5x full: %s (%.2fx)\n' \
  "$(met "$(med full gpc) <= 1.1 && $(med L5 gpc) <= 1.1")" "$(med full gpc)" "$(med L5 gpc)" \
  "$(met "$(ratio full per-frame) >= 10")" "$(ratio full per-frame)" "$(met "$(ratio L5 full) >= 1.5")" "$(ratio L5 full)"
