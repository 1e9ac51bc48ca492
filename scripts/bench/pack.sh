#!/usr/bin/env bash
# Pack throughput: `fidelityfs pack --jobs 2` against a per-file `jpegtran -progressive` loop
# (how the PCR reference transcodes), same files, same run; plus bytes per level.
#   scripts/bench/pack.sh [COUNT=2000] [RUNS=3]
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-3}
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
  "$bin" pack "$src" "$out/store" --jobs 2 --progress off >/dev/null
  t1=$(now)
  for f in "${files[@]}"; do
    jpegtran -copy all -progressive -outfile "$out/jpegtran/${f##*/}" "$f"
  done
  t2=$(now)
  fid_times+=("$(echo "$t1 - $t0" | bc -l)")
  loop_times+=("$(echo "$t2 - $t1" | bc -l)")
done
fid=$(printf '%s\n' "${fid_times[@]}" | median)
loop=$(printf '%s\n' "${loop_times[@]}" | median)
printf '\npack benchmark: %d ImageNet-like JPEGs (%s), median of %d runs\n' "$n" "$(du -sh "$src" | cut -f1)" "$runs"
printf '%-42s %10s %12s\n' "method" "seconds" "images/s"
printf '%-42s %10.2f %12.1f\n' "fidelityfs pack --jobs 2" "$fid" "$(echo "$n / $fid" | bc -l)"
printf '%-42s %10.2f %12.1f\n' "jpegtran -progressive, one process per file" "$loop" "$(echo "$n / $loop" | bc -l)"
printf 'ratio (fidelityfs / jpegtran loop): %.2fx   (goal >= 2.0)\n' "$(echo "$loop / $fid" | bc -l)"
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
printf '{"files": %d, "fidelityfs_s": %s, "jpegtran_loop_s": %s, "bytes_by_level": %s}\n' "$n" "$fid" "$loop" \
  "$("$bin" inspect "$out/store" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_by_level"])')" \
  >"$BENCH_DIR/results/pack.json"
