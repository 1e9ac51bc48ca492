#!/usr/bin/env bash
# Pack throughput at equal parallelism: `fidelityfs pack --jobs 2` against a per-file
# `jpegtran -progressive` loop (how the PCR reference transcodes) run as 2 processes at a time,
# same files, same run; plus bytes per level.
#   scripts/bench/pack.sh [COUNT=2000] [RUNS=3]
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-3}
jobs=2  # processes on both sides
bench_setup
src=$(make_dataset imagenet "$count" 20)
mapfile -t files < <(find "$src" -name '*.JPEG' | sort)
n=${#files[@]}
cat "${files[@]}" >/dev/null  # both sides start with the source in the page cache
out=$BENCH_DIR/pack-out
fid_times=() loop_times=()
for ((r = 1; r <= runs; r++)); do
  rm -rf "$out" && mkdir -p "$out/jpegtran"
  t0=$(now)
  "$bin" pack "$src" "$out/store" --jobs "$jobs" --progress off >/dev/null
  t1=$(now)
  # $jobs workers, worker w takes files w, w+jobs, ...: one jpegtran process per file, as before,
  # $jobs of them at a time.
  for ((w = 0; w < jobs; w++)); do
    (for ((i = w; i < n; i += jobs)); do
      f=${files[i]}
      jpegtran -copy all -progressive -outfile "$out/jpegtran/${f##*/}" "$f"
    done) &
  done
  wait
  t2=$(now)
  fid_times+=("$(echo "$t1 - $t0" | bc -l)")
  loop_times+=("$(echo "$t2 - $t1" | bc -l)")
done
fid=$(printf '%s\n' "${fid_times[@]}" | median)
loop=$(printf '%s\n' "${loop_times[@]}" | median)
printf '\npack benchmark: %d ImageNet-like JPEGs (%s), median of %d runs\n' "$n" "$(du -sh "$src" | cut -f1)" "$runs"
printf '%-54s %10s %12s\n' "method" "seconds" "images/s"
printf '%-54s %10.2f %12.1f\n' "fidelityfs pack --jobs $jobs" "$fid" "$(echo "$n / $fid" | bc -l)"
printf '%-54s %10.2f %12.1f\n' "jpegtran -progressive, one process per file, $jobs at once" "$loop" "$(echo "$n / $loop" | bc -l)"
printf 'ratio (fidelityfs / jpegtran loop): %.2fx\n' "$(echo "$loop / $fid" | bc -l)"
jt=$(du -cb "$out"/jpegtran/* | tail -1 | cut -f1)
"$bin" inspect "$out/store" --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
b = j["bytes_by_level"]
jt = int(sys.argv[1])
print("cumulative bytes per level (all JPEGs), fraction of full:")
print("  " + "  ".join(f"L{k + 1}:{v / b[-1]:.3f}" for k, v in enumerate(b)))
src = j["source_bytes"]
print(f"full level {b[-1] / 1e6:.1f} MB vs source {src / 1e6:.1f} MB vs jpegtran output {jt / 1e6:.1f} MB")
' "$jt"
mkdir -p "$BENCH_DIR/results"
printf '{"files": %d, "jobs": %d, "fidelityfs_s": %s, "jpegtran_loop_s": %s, "bytes_by_level": %s}\n' "$n" "$jobs" "$fid" "$loop" \
  "$("$bin" inspect "$out/store" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_by_level"])')" \
  >"$BENCH_DIR/results/pack.json"
