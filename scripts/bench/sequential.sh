#!/usr/bin/env bash
# Sequential levels (encoding=sequential): what a CPU-bound loader gets from a level read as one
# sequential scan, next to the source JPEGs and the progressive level, on ImageNet-sized JPEGs,
# in one run:
#   * sequential_bench: the re-encoding's cost per image (one thread and every core, standard and
#     optimized Huffman tables), each form's bytes and libjpeg-turbo decode speed;
#   * the tree packed (`pack --levels LEVELS`) and mounted twice with encoding=sequential: at
#     level 5 (its /.fidelity/sg/5 view is the progressive level 5) and at full;
#   * decode_loader.py over the source on ext4, progressive level 5, sequential level 5 and
#     sequential full: ImageFolder + RandomResizedCrop(224) + DataLoader (2 workers) images/s,
#     warm (the mount's view cache holds every re-encoded file), and one-thread decode time with
#     Pillow, torchvision's decode_jpeg, and decode_jpeg + RandomResizedCrop(224).
# Needs root (mounts).
#   scripts/bench/sequential.sh [COUNT=2000] [RUNS=3]
#   env: LEVELS=pcr|fast (the pack's scan scripts, default pcr)
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-3}
levels=${LEVELS:-pcr}
[[ $EUID == 0 ]] || { echo "sequential.sh: needs root (mounts)" >&2; exit 2; }
BUILD_TARGETS="fidelityfs sequential_bench" bench_setup
m=$BENCH_DIR/sequential-mnt
mounted=()
cleanup() { for d in "${mounted[@]}"; do fusermount3 -u "$d" 2>/dev/null || true; done; }
trap cleanup EXIT

src=$(make_dataset imagenet-sized "$count" 20)
printf '## imagenet-sized: %s files (%s), --levels %s\n\n' "$count" "$src" "$levels"
"$root/build/scripts/bench/sequential_bench" --max "$count" --levels "$levels" --runs "$runs" "$src"
echo

store=$BENCH_DIR/sequential-$count-$levels
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --levels "$levels" --progress off >/dev/null
# cache=4GiB: its view cache (a quarter) holds every re-encoded file of both mounts, so the timed
# epochs are warm like the source's page cache.
for what in L5:scan_group=5 full:scan_group=full; do
  d=$m/${what%%:*}
  mkdir -p "$d"
  fusermount3 -u "$d" 2>/dev/null || true
  "$bin" mount "$store" "$d" -o "${what#*:},encoding=sequential,cache=4GiB"
  mounted+=("$d")
done
/usr/bin/python3 "$root/scripts/bench/decode_loader.py" "source=$src" "progressive-L5=$m/L5/.fidelity/sg/5" \
  "sequential-L5=$m/L5" "sequential-full=$m/full" --runs "$runs" --decode-passes "$runs" --decode-files 1000 \
  --json "$BENCH_DIR/results/sequential-$levels.json"
echo
echo "Goals: one thread, sequential-L5 >= 1.8x the source with Pillow and decode_jpeg, >= 1.3x with"
echo "decode_jpeg + RandomResizedCrop(224); sequential-full >= 1.0x; DataLoader sequential-L5 >= 1.0x;"
echo "re-encoding <= 1.5 ms per image on one thread, and the cores' rate >= that times the cores."
