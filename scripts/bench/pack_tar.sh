#!/usr/bin/env bash
# Pack throughput from tar sources against the same tree as a folder: the folder, an ILSVRC-shaped
# tar of class tars (--expand-inner-tars), WebDataset-style shards (8 uncompressed tars, files
# dealt round-robin) and, for reference, one .tar.zst (streamed, tar order). Same files, same
# --jobs, every source in the page cache before each pack; the methods alternate within a run.
#   scripts/bench/pack_tar.sh [COUNT=2000] [RUNS=5]
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-5}
jobs=2
bench_setup
src=$(make_dataset imagenet "$count" 20)
tars=$BENCH_DIR/pack-tar-sources-$count
if [[ ! -f $tars/.done ]]; then
  rm -rf "$tars" && mkdir -p "$tars/inner" "$tars/shards"
  for d in "$src"/*/; do c=$(basename "$d"); tar -cf "$tars/inner/$c.tar" -C "$d" .; done
  tar -cf "$tars/ilsvrc.tar" -C "$tars/inner" .
  (cd "$src" && find . -maxdepth 1 -type f -printf '%P\n' | tar -rf "$tars/ilsvrc.tar" -T -)  # top-level files
  mapfile -t rels < <(cd "$src" && find . -type f ! -name .done -printf '%P\n' | sort)
  for ((k = 0; k < 8; k++)); do
    printf '%s\n' "${rels[@]}" | awk -v k=$k 'NR % 8 == k' | tar -cf "$tars/shards/shard-$k.tar" -C "$src" -T -
  done
  tar --zstd -cf "$tars/tree.tar.zst" -C "$src" --exclude=.done .
  rm -rf "$tars/inner"
  touch "$tars/.done"
fi
out=$BENCH_DIR/pack-tar-out
methods=(folder ilsvrc shards zst)
declare -A T
warm() { find "$src" -type f -exec cat {} + >/dev/null; cat "$tars"/ilsvrc.tar "$tars"/shards/*.tar "$tars"/tree.tar.zst >/dev/null; }
pack_one() {
  case $1 in
    folder) "$bin" pack "$src" "$out/store" --jobs $jobs --progress off ;;
    ilsvrc) "$bin" pack "$tars/ilsvrc.tar" "$out/store" --expand-inner-tars --jobs $jobs --progress off ;;
    shards) "$bin" pack "$tars/shards/shard-*.tar" "$out/store" --jobs $jobs --progress off ;;
    zst) "$bin" pack "$tars/tree.tar.zst" "$out/store" --jobs $jobs --progress off ;;
  esac
}
for ((r = 1; r <= runs; r++)); do
  for m in "${methods[@]}"; do
    rm -rf "$out" && mkdir -p "$out"
    warm
    t0=$(now)
    line=$(pack_one "$m" | head -1)
    t1=$(now)
    files=$(awk '{print $2}' <<<"$line")
    T[$m]+="$(echo "$t1 - $t0" | bc -l) "
  done
done
printf '\npack from tars: %d ImageNet-like files (%s), --jobs %d, median of %d runs (methods alternate)\n' \
  "$files" "$(du -sh "$src" | cut -f1)" "$jobs" "$runs"
printf '%-46s %10s %10s %16s\n' "source" "seconds" "files/s" "vs folder"
f_med=$(tr ' ' '\n' <<<"${T[folder]}" | grep . | median)
for m in "${methods[@]}"; do
  med=$(tr ' ' '\n' <<<"${T[$m]}" | grep . | median)
  case $m in
    folder) label="folder (ImageFolder tree)" ;;
    ilsvrc) label="tar of class tars (--expand-inner-tars)" ;;
    shards) label="8 WebDataset-style shards (.tar)" ;;
    zst) label=".tar.zst (streamed, tar order)" ;;
  esac
  printf '%-46s %10.2f %10.1f %15.3fx\n' "$label" "$med" "$(echo "$files / $med" | bc -l)" "$(echo "$f_med / $med" | bc -l)"
done
