#!/usr/bin/env bash
# Video clips on a disk model: clips/s of a clip loader (scripts/bench/clip_reader.py: 4 readers,
# clips in a seeded random order, each clip's frames in name order) with a cold page cache, the
# reads of the contender's process (the reader, or the mount's daemon) limited by a cgroup-v1
# blkio group to IOPS reads/s and BPS bytes/s on the data's disk (default 150 and 150 MiB/s, a
# 7200 rpm disk's figures). Contenders, on the same clips in the same order:
#   ext4      the rawframes folders, a file a frame;
#   gulp      GulpIO-like: each clip's frames concatenated in chunk files of 100 clips, one pread a
#             clip (clip_reader.py make-gulp);
#   gulp-direct  the same reads with O_DIRECT, as the mount reads its store: the blkio model
#             charges buffered reads less than direct ones (docs/BENCHMARKS.md, "Video clips");
#   full, L5  the mount (pack's defaults: clips auto, file layout) at full and at level 5, with the
#             default cache and with cache=32MiB (a store bigger than the cache);
#   full names  the mount at full, the loader building the frames' paths instead of listing the
#             clip's folder (mmaction2's RawFrameDecode);
#   full nopush the mount at full with clip_push=off: a READ a frame.
# For the mount, the FUSE requests a clip costs (from /.fidelity/stats): READs, LOOKUPs, and the
# listing's OPENDIR and READDIRs, and the frames pushed into the page cache.
# Two sets made from real photos (scripts/bench/make_clips.py): Jester-like (JESTER clips x 36
# frames, 176x100) and Kinetics-like (KINETICS clips x 64 frames, 340x256); every frame of a clip
# (`all`), then 8 spread over it as TSN takes them (`sparse`). A contender reads for at most
# SECONDS; it prints clips/s, the ratios, and the disk reads per clip (blkio.io_serviced).
# Needs root (drop_caches, cgroups, mounts).
#   scripts/bench/clips.sh [RUNS=1] [SECONDS=20]
#   env: JESTER=300 KINETICS=100 IOPS=150 BPS=157286400 SETS="jester kinetics" FRAMES="all sparse"
#        CONTENDERS="gulp-direct,full,L5" (a subset)
#        LAYOUT=file|scan (the mount's store; default file, pack's default)
source "$(dirname "$0")/common.sh"
runs=${1:-1}
seconds=${2:-20}
iops=${IOPS:-150}
bps=${BPS:-157286400}
[[ $EUID == 0 ]] || { echo "clips.sh: needs root (drop_caches, cgroups, mounts)" >&2; exit 2; }
BUILD_TARGETS=fidelityfs bench_setup
reader=$root/scripts/bench/clip_reader.py

# make_set KIND CLIPS FRAMES: the rawframes tree, its clip list, its gulp chunks and its store.
make_set() {
  local dir=$BENCH_DIR/clips-$1-$2x$3
  if [[ ! -f $dir/.done ]]; then
    rm -rf "$dir"
    /usr/bin/python3 "$root/scripts/bench/make_clips.py" --kind "$1" --clips "$2" --frames "$3" --out "$dir/src" >&2
    (cd "$dir/src" && find . -type f | sed 's|^\./||; s|/[^/]*$||' | sort -u) >"$dir/list"
    /usr/bin/python3 "$reader" make-gulp "$dir/src" "$dir/list" "$dir/gulp"
    "$bin" pack "$dir/src" "$dir/store" --progress off >/dev/null
    touch "$dir/.done"
  fi
  [[ $layout == file || -f $dir/store-$layout/index.sqlite ]] ||
    "$bin" pack "$dir/src" "$dir/store-$layout" --layout "$layout" --progress off >/dev/null
  echo "$dir"
}
layout=${LAYOUT:-file}
store_of() { if [[ $layout == file ]]; then echo "$1/store"; else echo "$1/store-$layout"; fi; }

cg=/sys/fs/cgroup/blkio/fidelityfs-clips
m=$BENCH_DIR/clips-mnt
dev=''
limits() { echo "$dev $1" >"$cg/blkio.throttle.read_iops_device" && echo "$dev $2" >"$cg/blkio.throttle.read_bps_device"; }
cleanup() {
  fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true
  [[ -d $cg ]] || return 0
  [[ -z $dev ]] || limits 0 0 2>/dev/null || true
  remove_cgroup "$cg"
}
mkdir -p "$m" "$cg"
trap cleanup EXIT
trap 'exit 130' INT TERM
cg_reads() { awk -v d="$dev" '$1 == d && $2 == "Read" {r = $3} END {print r + 0}' "$cg/blkio.throttle.io_serviced"; }

# run CONTENDER SET_DIR FRAMES SEED: prints "clips/s reads/clip".
run() {
  local what=$1 dir=$2 frames=$3 seed=$4 out q0 opts
  case $what in
    ext4 | gulp | gulp-direct)
      cold
      q0=$(cg_reads)
      if [[ $what == ext4 ]]; then
        out=$(in_cgroup "$cg" /usr/bin/python3 "$reader" frames "$dir/src" "$dir/list" --frames "$frames" --seed "$seed" --seconds "$seconds")
      else
        out=$(in_cgroup "$cg" /usr/bin/python3 "$reader" gulp "$dir/gulp/index.json" --seed "$seed" --seconds "$seconds" \
          $([[ $what == gulp-direct ]] && echo --direct))
      fi ;;
    *)
      opts="scan_group=${what%% *}"
      [[ $what == *32MiB* ]] && opts+=",cache=32MiB"
      [[ $what == *nopush* ]] && opts+=",clip_push=off"
      in_cgroup "$cg" "$bin" mount "$(store_of "$dir")" "$m" -o "${opts/scan_group=L5/scan_group=5}" 2>/dev/null
      cold
      q0=$(cg_reads)
      out=$(/usr/bin/python3 "$reader" frames "$m" "$dir/list" --frames "$frames" --seed "$seed" --seconds "$seconds" \
        $([[ $what == *names* ]] && echo --names-from "$dir/src"))
      cat "$m/.fidelity/stats" >"$BENCH_DIR/clips.stats.json"  # one open: cp fails if the stats change between its stat and its open
      fusermount3 -u "$m" ;;
  esac
  local clips
  clips=$(field "$out" clips)
  echo "$(field "$out" clips_per_s) $(x "($(cg_reads) - $q0) / $clips") $(requests_per_clip "$what" "$clips")"
}

# requests_per_clip CONTENDER CLIPS: "READs LOOKUPs listing pushed" a clip, from the mount's stats
# ("- - - -" for the others).
requests_per_clip() {
  case $1 in ext4 | gulp | gulp-direct) echo "- - - -"; return ;; esac
  /usr/bin/python3 - "$BENCH_DIR/clips.stats.json" "$2" <<'PY'
import json, sys
s, n = json.load(open(sys.argv[1])), int(sys.argv[2])
r = s["requests"]
print(" ".join(f"{v / n:.1f}" for v in (r["read"], r["lookup"], r["opendir"] + r["readdir"], s["clips"]["pushed_frames"])))
PY
}

contenders=("ext4" "gulp" "gulp-direct" "full" "L5" "full 32MiB" "L5 32MiB" "full names" "full nopush")
# CONTENDERS="full,L5": a subset, for an A/B of the mount (its table only, no goals).
[[ -n ${CONTENDERS:-} ]] && IFS=, read -r -a contenders <<<"$CONTENDERS"
for set in ${SETS:-jester kinetics}; do
  if [[ $set == jester ]]; then dir=$(make_set jester "${JESTER:-300}" 36); else dir=$(make_set kinetics "${KINETICS:-100}" 64); fi
  dev=$(disk_of "$dir/src")
  limits "$iops" "$bps"
  for frames in ${FRAMES:-all sparse}; do
    declare -A R=() Q=()
    for ((r = 0; r < runs; r++)); do
      for c in "${contenders[@]}"; do  # (GulpIO reads a clip whole, sparse or not)
        read -r cps rpc reads lookups listing pushed < <(run "$c" "$dir" "$frames" "$r")
        R[$c,fps]+=" $cps"
        R[$c,rpc]+=" $rpc"
        Q[$c]="$reads $lookups $listing $pushed"  # FUSE requests a clip (the last run's)
      done
    done
    printf '\n## %s (%s, %s layout), frames: %s, blkio %s reads/s and %s MiB/s, cold, 4 readers, median of %s\n\n' \
      "$set" "$(basename "$dir")" "$layout" "$frames" "$iops" "$((bps >> 20))" "$runs"
    printf '| contender | clips/s | vs ext4 | vs gulp | vs gulp-direct | disk reads/clip | FUSE READ/LOOKUP/listing a clip | frames pushed a clip |\n'
    printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
    for c in "${contenders[@]}"; do
      read -r q_read q_lookup q_list q_push <<<"${Q[$c]}"
      printf '| %s | %.1f | %.2fx | %.2fx | %.2fx | %.1f | %s / %s / %s | %s |\n' "$c" "$(med "$c" fps)" "$(ratio "$c" ext4)" \
        "$(ratio "$c" gulp)" "$(ratio "$c" gulp-direct)" "$(med "$c" rpc)" "$q_read" "$q_lookup" "$q_list" "$q_push"
    done
    [[ -n ${CONTENDERS:-} ]] && continue  # a subset: the goals need every contender
    printf '\ngoals: full >= 0.9x gulp-direct: %s (%.2fx; 32MiB: %s, %.2fx)' "$(met "$(ratio full gulp-direct) >= 0.9")" \
      "$(ratio full gulp-direct)" "$(met "$(ratio "full 32MiB" gulp-direct) >= 0.9")" "$(ratio "full 32MiB" gulp-direct)"
    [[ $frames == all ]] && printf '; at most 3 FUSE requests a clip besides the listing: %s (%s READ + %s LOOKUP)' \
      "$(met "$(awk '{print $1 + $2}' <<<"${Q[full]}") <= 3")" "$(awk '{print $1}' <<<"${Q[full]}")" "$(awk '{print $2}' <<<"${Q[full]}")"
    [[ $set == kinetics ]] && printf '; L5 >= 1.1x full: %s (%.2fx; 32MiB %.2fx)' "$(met "$(ratio L5 full) >= 1.1")" \
      "$(ratio L5 full)" "$(ratio "L5 32MiB" "full 32MiB")"
    [[ $frames == sparse ]] && printf '; sparse >= 5x ext4: %s (%.1fx)' "$(met "$(ratio "full 32MiB" ext4) >= 5")" \
      "$(ratio "full 32MiB" ext4)"
    printf '\n'
  done
  limits 0 0
done
