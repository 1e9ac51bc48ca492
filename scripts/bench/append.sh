#!/usr/bin/env bash
# `fidelityfs pack --append` against packing everything again: COUNT ImageNet-sized JPEGs, split
# into the store's files (nine in ten) and the new ones (every tenth, by walk order). Per run, from
# a dropped page cache and with the same --jobs: the pack of all COUNT files (the baseline: what a
# store without append costs when it grows), and the append of the new tenth to a pack of the
# other nine (made before the run, not timed). Prints the seconds and the bytes each writes (the
# append: the new records and the index), medians of RUNS runs, and their ratios. Needs root.
# TARGET=s3: both stores on a Ceph RGW on loopback (scripts/s3-server.sh), the bytes written
# counted from the bucket's listing.
#   scripts/bench/append.sh [COUNT=10000] [RUNS=3] [JOBS=2]   env: TARGET=local|s3
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
target=${TARGET:-local}

if [[ $target == s3 ]]; then
  # RAM for every store the runs make: RGW frees deleted objects only later (its garbage collection).
  need=$(((512 << 20) + (2 * runs + 1) * $(du -sb "$src" | cut -f1)))
  eval "$(FIDELITYFS_S3_MEMSTORE_BYTES=$need "$root/scripts/s3-server.sh" start "$work/rgw")"
  trap '"$root/scripts/s3-server.sh" stop "$work/rgw" >/dev/null; rm -rf "$work"' EXIT
  s3() { aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }
  s3 s3 mb s3://fidbench >/dev/null
  export TMPDIR=$work/tmp
  mkdir -p "$TMPDIR"
  store_at() { echo "s3://fidbench/$1"; }
  # Bytes under a store's prefix; the size of its index.
  stored_bytes() { s3 s3api list-objects-v2 --bucket fidbench --prefix "$1/" --query 'sum(Contents[].Size)' --output text; }
  index_bytes() { s3 s3api head-object --bucket fidbench --key "$1/index.sqlite" --query ContentLength --output text; }
  remove_store() { s3 s3 rm --recursive --only-show-errors "s3://fidbench/$1"; }
else
  store_at() { echo "$work/$1"; }
  stored_bytes() { du -sb --apparent-size "$work/$1" | cut -f1; }
  index_bytes() { stat -c %s "$work/$1/index.sqlite"; }
  remove_store() { rm -rf "${work:?}/$1"; }
fi

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
  remove_store full
  remove_store store
  "$bin" pack "$work/base" "$(store_at store)" --jobs "$jobs" --progress off >/dev/null
  before=$(stored_bytes store)
  index_before=$(index_bytes store)
  for turn in $( ((i % 2)) && echo "full append" || echo "append full"); do
    if [[ $turn == full ]]; then
      s=$(timed "$bin" pack "$src" "$(store_at full)" --jobs "$jobs" --progress off)
      R[full,s]+="$s "
      R[full,b]+="$(stored_bytes full) "
    else
      s=$(timed "$bin" pack --append "$work/new" "$(store_at store)" --jobs "$jobs" --progress off)
      R[append,s]+="$s "
      # What the append wrote: the new records and the new index (it replaced the old one).
      grew=$(($(stored_bytes store) - before))
      R[append,b]+="$((grew + index_before)) "
      R[append,store]+="$grew "
    fi
    echo "run $i: $turn: $s s" >&2
  done
done
med_of() { printf '%s\n' $1 | median; }
fs=$(med_of "${R[full,s]}"); as=$(med_of "${R[append,s]}")
fb=$(med_of "${R[full,b]}"); ab=$(med_of "${R[append,b]}")
printf '\nappend benchmark (%s): %d ImageNet-sized JPEGs, %d of them (%.0f%%) appended to a store of the rest; --jobs %d, page cache dropped every run; median of %d runs\n' \
  "$target" "$count" "$new_files" "$(echo "100 * $new_files / $count" | bc -l)" "$jobs" "$runs"
printf '  %-34s %8.1f s  %10.1f MB written\n' "pack of all $count files" "$fs" "$(echo "$fb / 1000000" | bc -l)"
printf '  %-34s %8.1f s  %10.1f MB written (the store grew %.1f MB)\n' "pack --append of the $new_files new" "$as" \
  "$(echo "$ab / 1000000" | bc -l)" "$(echo "$(med_of "${R[append,store]}") / 1000000" | bc -l)"
printf '  append / full pack: time %.3f, bytes written %.3f\n' "$(echo "$as / $fs" | bc -l)" "$(echo "$ab / $fb" | bc -l)"
