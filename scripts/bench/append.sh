#!/usr/bin/env bash
# `fidelityfs pack --append` against packing everything again: COUNT ImageNet-sized JPEGs, split
# into the store's files (nine in ten) and the new ones (every tenth, by walk order). Per run, from
# a dropped page cache and with the same --jobs: the pack of all COUNT files (the baseline: what a
# store without append costs when it grows), and the append of the new tenth to a pack of the
# other nine (made before the run, not timed). Prints the seconds and the bytes each writes (the
# append: the new records and the index), medians of RUNS runs, and their ratios. Needs root.
#   scripts/bench/append.sh [COUNT=10000] [RUNS=3] [JOBS=2]
source "$(dirname "$0")/common.sh"
count=${1:-10000}
runs=${2:-3}
jobs=${3:-2}
[[ $EUID == 0 ]] || { echo "append.sh: needs root (drop_caches)" >&2; exit 2; }
bench_setup
src=$(make_dataset imagenet-sized "$count" 100)
work=$BENCH_DIR/append-$count
rm -rf "$work"
mkdir -p "$work/base" "$work/new"
trap 'rm -rf "$work"' EXIT
# The split: every tenth file (walk order) is new; both halves copies, so the sources sit alike.
(cd "$src" && find . -type f ! -name '.done' | LC_ALL=C sort) | awk -v b="$work/base" -v n="$work/new" \
  '{ print ((NR % 10 == 0) ? n : b) "\t" $0 }' | while IFS=$'\t' read -r to rel; do
  mkdir -p "$to/$(dirname "$rel")" && cp "$src/$rel" "$to/$rel"
done
new_files=$(find "$work/new" -type f | wc -l)

timed() {  # CMD... -> seconds, from a dropped page cache
  cold
  local t0 t1
  t0=$(now)
  "$@" >/dev/null
  t1=$(now)
  echo "$t1 - $t0" | bc -l
}
declare -A R=()
for ((i = 1; i <= runs; i++)); do
  rm -rf "$work/full" "$work/store"
  "$bin" pack "$work/base" "$work/store" --jobs "$jobs" --progress off >/dev/null
  before=$(du -sb --apparent-size "$work/store" | cut -f1)
  records_before=$(find "$work/store/records" -type f | wc -l)
  for turn in $( ((i % 2)) && echo "full append" || echo "append full"); do
    if [[ $turn == full ]]; then
      s=$(timed "$bin" pack "$src" "$work/full" --jobs "$jobs" --progress off)
      R[full,s]+="$s "
      R[full,b]+="$(du -sb --apparent-size "$work/full" | cut -f1) "
    else
      s=$(timed "$bin" pack --append "$work/new" "$work/store" --jobs "$jobs" --progress off)
      R[append,s]+="$s "
      # What the append wrote: the new records and the new index (the old index is replaced).
      new_records=$(find "$work/store/records" -type f -printf '%f %s\n' | LC_ALL=C sort | tail -n +$((records_before + 1)) |
        awk '{n += $2} END {print n + 0}')
      R[append,b]+="$((new_records + $(stat -c %s "$work/store/index.sqlite"))) "
      R[append,store]+="$(($(du -sb --apparent-size "$work/store" | cut -f1) - before)) "
    fi
    echo "run $i: $turn: $s s" >&2
  done
done
med_of() { printf '%s\n' $1 | median; }
fs=$(med_of "${R[full,s]}"); as=$(med_of "${R[append,s]}")
fb=$(med_of "${R[full,b]}"); ab=$(med_of "${R[append,b]}")
printf '\nappend benchmark: %d ImageNet-sized JPEGs, %d of them (%.0f%%) appended to a store of the rest; --jobs %d, page cache dropped every run; median of %d runs\n' \
  "$count" "$new_files" "$(echo "100 * $new_files / $count" | bc -l)" "$jobs" "$runs"
printf '  %-34s %8.1f s  %10.1f MB written\n' "pack of all $count files" "$fs" "$(echo "$fb / 1000000" | bc -l)"
printf '  %-34s %8.1f s  %10.1f MB written (the store grew %.1f MB)\n' "pack --append of the $new_files new" "$as" \
  "$(echo "$ab / 1000000" | bc -l)" "$(echo "$(med_of "${R[append,store]}") / 1000000" | bc -l)"
printf '  append / full pack: time %.3f, bytes written %.3f\n' "$(echo "$as / $fs" | bc -l)" "$(echo "$ab / $fb" | bc -l)"
