#!/usr/bin/env bash
# Sharded pack and merge, each figure beside its baseline from the same run:
#  1. speed: one `pack --jobs 1` of COUNT ImageNet-like JPEGs against two `pack --shard I/2
#     --jobs 1` run at once (2 cores) followed by `merge`, same files, source in the page cache,
#     the two methods alternating within each of RUNS runs; the ratio of their times. Beside
#     them, one `pack --jobs 2`: what the 2 cores give one process (the hardware's own speed-up,
#     which no split of the work beats);
#  2. merge at scale: MERGE_COUNT empty files in 1,000 folders (the namespace with the least
#     data), packed as 2 parts; the merge's seconds and peak RSS beside the parts' pack's.
#   scripts/bench/shard.sh [COUNT=2000] [RUNS=3]      env: MERGE_COUNT=1281167 (0: skip part 2)
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-3}
merge_count=${MERGE_COUNT:-1281167}
bench_setup
src=$(make_dataset imagenet "$count" 20)
out=$BENCH_DIR/shard-out
# peak KILOBYTES CMD...: runs CMD, then prints the peak RSS of it and its children in KiB.
peak() { /usr/bin/python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"; }
warm() { find "$src" -type f -exec cat {} + >/dev/null; }
one=() sharded=() two=()
for ((r = 1; r <= runs; r++)); do
  rm -rf "$out" && mkdir -p "$out/parts"
  warm
  t0=$(now)
  "$bin" pack "$src" "$out/single" --jobs 1 --progress off >/dev/null
  t1=$(now)
  warm
  t2=$(now)
  for i in 0 1; do "$bin" pack "$src" "$out/parts/$i" --shard "$i/2" --jobs 1 --progress off >/dev/null & done
  wait
  "$bin" merge "$out/parts/0" "$out/parts/1" "$out/merged" >/dev/null
  t3=$(now)
  warm
  t4=$(now)
  "$bin" pack "$src" "$out/jobs2" --jobs 2 --progress off >/dev/null
  t5=$(now)
  one+=("$(echo "$t1 - $t0" | bc -l)")
  two+=("$(echo "$t5 - $t4" | bc -l)")
  sharded+=("$(echo "$t3 - $t2" | bc -l)")
done
n=$(find "$src" -type f ! -name .done | wc -l)
o=$(printf '%s\n' "${one[@]}" | median)
s=$(printf '%s\n' "${sharded[@]}" | median)
j=$(printf '%s\n' "${two[@]}" | median)
printf '\nsharded pack: %d ImageNet-like files (%s), median of %d runs (methods alternate)\n' "$n" "$(du -sh "$src" | cut -f1)" "$runs"
printf '%-52s %10s %10s\n' "method" "seconds" "files/s"
printf '%-52s %10.2f %10.1f\n' "pack --jobs 1" "$o" "$(echo "$n / $o" | bc -l)"
printf '%-52s %10.2f %10.1f\n' "2 x pack --shard I/2 --jobs 1 at once, then merge" "$s" "$(echo "$n / $s" | bc -l)"
printf '%-52s %10.2f %10.1f\n' "pack --jobs 2 (one process on both cores)" "$j" "$(echo "$n / $j" | bc -l)"
printf 'speed-up of the shards (goal >= 1.8): %.2fx; of --jobs 2: %.2fx\n' "$(echo "$o / $s" | bc -l)" "$(echo "$o / $j" | bc -l)"

((merge_count > 0)) || exit 0
tree=$BENCH_DIR/empty-$merge_count
if [[ ! -f $tree/.done ]]; then
  rm -rf "$tree"
  /usr/bin/python3 - "$tree" "$merge_count" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for c in range(1000):
    os.makedirs(os.path.join(root, f"n{c:08d}"))
for i in range(n):
    os.close(os.open(os.path.join(root, f"n{i % 1000:08d}", f"n{i % 1000:08d}_{i}.JPEG"), os.O_CREAT | os.O_WRONLY, 0o644))
open(os.path.join(root, ".done"), "w").close()
PY
fi
rm -rf "$out" && mkdir -p "$out/parts"
t0=$(now)
pack_kb=$(peak "$bin" pack "$tree" "$out/parts/0" --shard 0/2 --jobs 2 --progress off)
t1=$(now)
peak "$bin" pack "$tree" "$out/parts/1" --shard 1/2 --jobs 2 --progress off >/dev/null
cold
t2=$(now)
merge_kb=$(peak "$bin" merge "$out/parts/0" "$out/parts/1" "$out/merged")
t3=$(now)
files=$(sqlite3 "$out/merged/index.sqlite" 'SELECT count(*) FROM files')
printf '\nmerge at scale: %d empty files in 1,000 folders, 2 parts\n' "$files"
printf '%-52s %10s %14s\n' "step" "seconds" "peak RSS MiB"
printf '%-52s %10.1f %14.1f\n' "pack --shard 0/2 --jobs 2 (one part)" "$(echo "$t1 - $t0" | bc -l)" "$(echo "$pack_kb / 1024" | bc -l)"
printf '%-52s %10.1f %14.1f\n' "merge of the 2 parts, cold page cache (goal <= 30 s)" "$(echo "$t3 - $t2" | bc -l)" "$(echo "$merge_kb / 1024" | bc -l)"
rm -rf "$out"
