#!/usr/bin/env bash
# `fidelityfs relayout` against copying the same records with cp: COUNT ImageNet-sized JPEGs packed
# in the scan layout, then, every run from a dropped page cache and into a fresh folder on the same
# disk (the two programs loaded, the data cold), `cp -r STORE/records OUT && sync` (the baseline: the bytes moved, flushed as relayout
# flushes them) and `fidelityfs relayout STORE OUT --layout file` (every record read, its pieces
# checked and moved, written, flushed; the index). Both directions are timed: scan -> file, and
# that file store -> scan. Turns alternate (a different one first each run); figures are medians of
# RUNS runs, ratios medians of the per-run ratios. Needs root (drop_caches).
#   scripts/bench/relayout.sh [COUNT=2000] [RUNS=3]
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-3}
[[ $EUID == 0 ]] || { echo "relayout.sh: needs root (drop_caches)" >&2; exit 2; }
bench_setup
src=$(make_dataset imagenet-sized "$count" 20)
scan=$BENCH_DIR/relayout-scan-$count
[[ -f $scan/index.sqlite ]] || "$bin" pack "$src" "$scan" --layout scan --progress off --jobs 2 >/dev/null
file=$BENCH_DIR/relayout-file-$count
[[ -f $file/index.sqlite ]] || "$bin" relayout "$scan" "$file" --layout file --progress off >/dev/null
out=$BENCH_DIR/relayout-out
trap 'rm -rf "$out"' EXIT
bytes=$(du -sb "$scan/records" | cut -f1)

# timed CMD... -> seconds, from a dropped page cache into an absent $out
timed() {
  rm -rf "$out"
  cold
  # The programs themselves warm, the data cold, for both: a cold fidelityfs binary (RelWithDebInfo,
  # ~86 MB) would add ~0.1 s of loading that a 150 KB cp does not pay.
  "$bin" --version >/dev/null
  cp --version >/dev/null
  local t0 t1
  t0=$(now)
  "$@" >/dev/null
  t1=$(now)
  echo "$t1 - $t0" | bc -l
}
copy() { cp -r "$1/records" "$out" && sync; }

declare -A R=()
names=("cp scan" "relayout scan->file" "cp file" "relayout file->scan")
for ((i = 1; i <= runs; i++)); do
  order=("${names[@]}")
  ((i % 2 == 0)) && order=("${names[2]}" "${names[3]}" "${names[0]}" "${names[1]}")
  for name in "${order[@]}"; do
    case $name in
      "cp scan") s=$(timed copy "$scan") ;;
      "relayout scan->file") s=$(timed "$bin" relayout "$scan" "$out" --layout file --progress off) ;;
      "cp file") s=$(timed copy "$file") ;;
      "relayout file->scan") s=$(timed "$bin" relayout "$file" "$out" --layout scan --progress off) ;;
    esac
    R[$name,s]+="$s "
    echo "run $i: $name: $s s" >&2
  done
  R[scan->file,ratio]+="$(echo "$(echo "${R[cp scan,s]}" | awk '{print $NF}') / $(echo "${R[relayout scan->file,s]}" | awk '{print $NF}')" | bc -l) "
  R[file->scan,ratio]+="$(echo "$(echo "${R[cp file,s]}" | awk '{print $NF}') / $(echo "${R[relayout file->scan,s]}" | awk '{print $NF}')" | bc -l) "
done
med_of() { printf '%s\n' $1 | median; }
printf '\nrelayout benchmark: %d ImageNet-sized JPEGs, %.1f MB of records, page cache dropped every run; median of %d runs\n' \
  "$count" "$(echo "$bytes / 1000000" | bc -l)" "$runs"
printf '%-22s %10s %10s\n' what seconds MB/s
for name in "${names[@]}"; do
  s=$(med_of "${R[$name,s]}")
  printf '%-22s %10.2f %10.0f\n' "$name" "$s" "$(echo "$bytes / 1000000 / $s" | bc -l)"
done
printf '\ngoal: relayout >= 0.8x the speed of cp of its records\n'
printf '  scan -> file: %.2fx\n  file -> scan: %.2fx\n' "$(med_of "${R[scan->file,ratio]}")" "$(med_of "${R[file->scan,ratio]}")"
