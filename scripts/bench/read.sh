#!/usr/bin/env bash
# Read throughput of the mount against its baselines, same tree, same reader, same run:
# the source on ext4, squashfuse_ll of a squashfs of the source, and the mount at full level
# and at level 5; random order, 2 reader threads, warm (page cache) and cold (dropped caches).
# Also the daemon's CPU time per file. Needs root (drop_caches, mounts).
# BASELINE_BIN=PATH adds a fifth source, the same store at level 5 mounted by another build of
# fidelityfs (scripts/bench/metrics.sh builds the one before metrics), and prints this build's
# files/s against it: the cost of what the newer build adds to the read path.
# A warm run reads the tree PASSES times (default 20: a warm pass of 5,000 files takes ~25 ms,
# too short to time on a shared machine).
# KIND: imagenet (the shared generator's ImageNet-like set: ImageNet's shapes, 25 KB per file)
# or imagenet-sized (make_imagenet_sized.py: ImageNet's ~110 KB per file).
#   scripts/bench/read.sh [COUNT=5000] [RUNS=5] [PASSES=20] [KIND=imagenet]
source "$(dirname "$0")/common.sh"
count=${1:-5000}
runs=${2:-5}
passes=${3:-20}
kind=${4:-imagenet}
[[ $kind == imagenet || $kind == imagenet-sized ]] || { echo "read.sh: KIND is imagenet or imagenet-sized, not '$kind'" >&2; exit 2; }
bench_setup
rb=$root/build/scripts/bench/readbench
src=$(make_dataset "$kind" "$count" 20)
store=$BENCH_DIR/store-$kind-$count
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --progress off >/dev/null
sqfs=$BENCH_DIR/$kind-$count.sqfs
[[ -f $sqfs ]] || mksquashfs "$src" "$sqfs" -noappend -quiet -no-progress >/dev/null

m=$BENCH_DIR/mnt
baseline=${BASELINE_BIN:-}
mkdir -p "$m/full" "$m/l5" "$m/sq" "$m/base"
cleanup() { for d in full l5 sq base; do fusermount3 -u "$m/$d" 2>/dev/null || true; done; }
trap cleanup EXIT
cleanup
"$bin" mount "$store" "$m/full" -o scan_group=full
"$bin" mount "$store" "$m/l5" -o scan_group=5
squashfuse_ll "$sqfs" "$m/sq"
[[ -z $baseline ]] || "$baseline" mount "$store" "$m/base" -o scan_group=5

(cd "$src" && find . -name '*.JPEG' | sort) >"$BENCH_DIR/list.rel"
n=$(wc -l <"$BENCH_DIR/list.rel")
declare -A roots=([ext4]=$src [squashfuse_ll]=$m/sq [fidelityfs_full]=$m/full [fidelityfs_l5]=$m/l5 [baseline_l5]=$m/base)
order=(ext4 squashfuse_ll fidelityfs_full fidelityfs_l5)
[[ -z $baseline ]] || order+=(baseline_l5)
for name in "${order[@]}"; do sed "s|^\.|${roots[$name]}|" "$BENCH_DIR/list.rel" >"$BENCH_DIR/list.$name"; done

declare -A fps_w mbs_w fps_c mbs_c cpu0 warm_fps warm_mbs cold_fps cold_mbs cpu_us rcpu_w reader_us
hz=$(getconf CLK_TCK)
declare -A pid=([fidelityfs_full]=$(daemon_pid "$m/full" "$store") [fidelityfs_l5]=$(daemon_pid "$m/l5" "$store"))
[[ -z $baseline ]] || pid[baseline_l5]=$(daemon_pid "$m/base" "$store" "$baseline")
# Every source's page cache filled the same way, by reading: a freshly written tree would
# otherwise sit in the large folios of ext4's write path, which read faster than the order-0
# folios that reading from disk leaves (as in a training epoch, and for every other source).
cold
for name in "${order[@]}"; do "$rb" "$BENCH_DIR/list.$name" --threads 2 --seed 0 --passes 2 >/dev/null; done  # warm-up
# Within a run the sources take turns pass by pass (readbench with all four lists), so that the
# noise of a shared machine hits them alike; the goals are ratios of the same run, one per run,
# their median quoted. The warm check below says whether any timed run reached storage (the
# four sources of a large tree can outgrow the page cache this machine keeps).
# FUSE reads of tree files (reading the stats file is a FUSE read too, counted apart).
stats_reads() { /usr/bin/python3 -c "import json,sys; print(sum(json.load(open(sys.argv[1]))['reads_by_kind'].values()))" "$1/.fidelity/stats"; }
lists=()
for name in "${order[@]}"; do lists+=("$BENCH_DIR/list.$name"); done
declare -A run_fps
ratios_ext4='' ratios_sq='' ratios_base='' warm_ext4_storage=0 warm_ext4_bytes=0 warm_daemon_reads=0
for ((r = 1; r <= runs; r++)); do
  d0=$(($(stats_reads "$m/full") + $(stats_reads "$m/l5")))
  mapfile -t outs < <("$rb" "${lists[@]}" --threads 2 --seed "$r" --passes "$passes")
  warm_daemon_reads=$((warm_daemon_reads + $(stats_reads "$m/full") + $(stats_reads "$m/l5") - d0))
  for i in "${!order[@]}"; do
    name=${order[$i]} out=${outs[$i]}
    if [[ $name == ext4 ]]; then
      warm_ext4_storage=$((warm_ext4_storage + $(field "$out" read_bytes)))
      warm_ext4_bytes=$((warm_ext4_bytes + $(field "$out" bytes)))
    fi
    run_fps[$name]=$(field "$out" files_per_s)
    fps_w[$name]+="${run_fps[$name]} " mbs_w[$name]+="$(field "$out" mb_per_s) "
    rcpu_w[$name]+="$(field "$out" cpu_us_per_file) "
  done
  ratios_ext4+="$(echo "${run_fps[fidelityfs_full]} / ${run_fps[ext4]}" | bc -l) "
  ratios_sq+="$(echo "${run_fps[fidelityfs_full]} / ${run_fps[squashfuse_ll]}" | bc -l) "
  [[ -z $baseline ]] || ratios_base+="$(echo "${run_fps[fidelityfs_l5]} / ${run_fps[baseline_l5]}" | bc -l) "
done
# The daemon's CPU time per file, measured on the cold runs where it serves every read (warm
# reads are page-cache hits that never reach it).
for name in "${!pid[@]}"; do cpu0[$name]=$(cpu_ticks "${pid[$name]}"); done
for ((r = 1; r <= runs; r++)); do
  for name in "${order[@]}"; do
    cold
    out=$("$rb" "$BENCH_DIR/list.$name" --threads 2 --seed "$((r + 100))")
    fps_c[$name]+="$(field "$out" files_per_s) " mbs_c[$name]+="$(field "$out" mb_per_s) "
  done
done
for name in "${!pid[@]}"; do
  cpu_us[$name]=$(echo "($(cpu_ticks "${pid[$name]}") - ${cpu0[$name]}) * 1000000 / $hz / ($n * $runs)" | bc -l)
done
for name in "${order[@]}"; do
  warm_fps[$name]=$(echo ${fps_w[$name]} | tr ' ' '\n' | median)
  warm_mbs[$name]=$(echo ${mbs_w[$name]} | tr ' ' '\n' | median)
  cold_fps[$name]=$(echo ${fps_c[$name]} | tr ' ' '\n' | median)
  cold_mbs[$name]=$(echo ${mbs_c[$name]} | tr ' ' '\n' | median)
  reader_us[$name]=$(echo ${rcpu_w[$name]} | tr ' ' '\n' | median)
done

printf '\nread benchmark: %d %s JPEGs (%.0f KB on average), random order, 2 reader threads, median of %d runs (warm: %d passes each)\n' "$n" "$kind" \
  "$(find "$src" -name '*.JPEG' -printf '%s\n' | awk '{s += $1} END {print s / NR / 1000}')" "$runs" "$passes"
printf '%-18s %12s %10s %12s %10s %22s %22s\n' source "warm files/s" "warm MB/s" "cold files/s" "cold MB/s" \
  "daemon us/file (cold)" "reader us/file (warm)"
for name in "${order[@]}"; do
  printf '%-18s %12.0f %10.1f %12.0f %10.1f %22s %22.2f\n' "$name" "${warm_fps[$name]}" "${warm_mbs[$name]}" \
    "${cold_fps[$name]}" "${cold_mbs[$name]}" "${cpu_us[$name]:+$(printf '%.2f' "${cpu_us[$name]}")}" \
    "${reader_us[$name]}"
done
r_ext4=$(echo $ratios_ext4 | tr ' ' '\n' | median)
r_sq=$(echo $ratios_sq | tr ' ' '\n' | median)
printf 'warm, full level, median of per-run ratios: %.2fx ext4 files/s (goal >= 0.9), %.2fx squashfuse_ll (goal >= 2.5)\n' "$r_ext4" "$r_sq"
printf '  per run vs ext4: %s\n' "$(for x in $ratios_ext4; do printf '%.2f ' "$x"; done)"
# Warm reads never reach the daemon: the reader's own CPU time per file is the kernel's cost of
# open/read/close on each filesystem, and is not inflated by other tenants of a shared machine.
printf 'warm reader CPU per file (user+sys): ext4 %.2f us, mount full %.2f us (%+.2f us)\n' \
  "${reader_us[ext4]}" "${reader_us[fidelityfs_full]}" "$(echo "${reader_us[fidelityfs_full]} - ${reader_us[ext4]}" | bc -l)"
if [[ -n $baseline ]]; then
  cold_ratios=''
  read -ra l5_runs <<<"${fps_c[fidelityfs_l5]}"
  read -ra base_runs <<<"${fps_c[baseline_l5]}"
  for i in "${!l5_runs[@]}"; do cold_ratios+="$(echo "${l5_runs[$i]} / ${base_runs[$i]}" | bc -l) "; done
  printf 'this build against BASELINE_BIN=%s, both at level 5, median of per-run ratios: warm %.3fx files/s (goal >= 0.98), cold %.3fx; daemon CPU per cold file %.2f us vs %.2f us\n' \
    "$baseline" "$(echo $ratios_base | tr ' ' '\n' | median)" "$(echo $cold_ratios | tr ' ' '\n' | median)" \
    "${cpu_us[fidelityfs_l5]}" "${cpu_us[baseline_l5]}"
  printf '  per run, warm: %s cold: %s\n' "$(for x in $ratios_base; do printf '%.3f ' "$x"; done)" \
    "$(for x in $cold_ratios; do printf '%.3f ' "$x"; done)"
fi
# Under 0.1% of the bytes from storage, or of the files through the daemon, counts as warm.
warm_files=$((n * passes * runs))
printf 'warm check: in the timed warm runs ext4 read %d bytes from storage (%.4f%% of those it returned) and the mounts answered %d FUSE reads (%.4f%% of their file reads): %s\n' \
  "$warm_ext4_storage" "$(echo "100 * $warm_ext4_storage / $warm_ext4_bytes" | bc -l)" \
  "$warm_daemon_reads" "$(echo "100 * $warm_daemon_reads / (2 * $warm_files)" | bc -l)" \
  "$([[ $((warm_ext4_storage * 1000 <= warm_ext4_bytes && warm_daemon_reads * 1000 <= 2 * warm_files)) == 1 ]] && echo warm || echo 'NOT warm: these are not page-cache figures')"
mkdir -p "$BENCH_DIR/results"
{
  printf '{"files": %d, "sources": {' "$n"
  sep=
  for name in "${order[@]}"; do
    printf '%s"%s": {"warm_fps": %s, "cold_fps": %s, "warm_reader_us": %s}' "$sep" "$name" "${warm_fps[$name]}" "${cold_fps[$name]}" "${reader_us[$name]}"
    sep=', '
  done
  printf '}}\n'
} >"$BENCH_DIR/results/read${kind#imagenet}.json"  # read.json, read-sized.json
