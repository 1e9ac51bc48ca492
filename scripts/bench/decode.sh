#!/usr/bin/env bash
# Levels that decode fast: what a CPU-bound loader gets from the `fast` scan scripts next to the
# `pcr` scripts and the source JPEGs, on the ImageNet-like set and on the ImageNet-sized set.
# For each set, in one run:
#   * the tree packed twice (`pack --levels pcr` and `--levels fast`) and each store mounted;
#   * decode_loader.py: torchvision ImageFolder + DataLoader (2 workers) images/s, warm, and
#     Pillow's decode time per image, for the source on ext4 and for each store at levels 1, 5 and
#     full (the mount at full level and its /.fidelity/sg/1 and sg/5 views), taking turns;
#   * level_curves.py: bytes fraction and MS-SSIM per level of both stores (`fidelityfs quality`),
#     the full level's bytes against pcr's and the MS-SSIM-against-bytes margin.
# Needs root (mounts).
#   scripts/bench/decode.sh [COUNT=2000] [RUNS=5]
#   env: SAMPLE=200 (files for MS-SSIM), KINDS="imagenet imagenet-sized" (the sets to run)
source "$(dirname "$0")/common.sh"
count=${1:-2000}
runs=${2:-5}
sample=${SAMPLE:-200}
[[ $EUID == 0 ]] || { echo "decode.sh: needs root (mounts)" >&2; exit 2; }
bench_setup
m=$BENCH_DIR/decode-mnt
mounted=()
cleanup() { for d in "${mounted[@]}"; do fusermount3 -u "$d" 2>/dev/null || true; done; }
trap cleanup EXIT

for kind in ${KINDS:-imagenet imagenet-sized}; do
  src=$(make_dataset "$kind" "$count" 20)
  printf '\n## %s: %s files (%s)\n\n' "$kind" "$count" "$src"
  for levels in pcr fast; do
    store=$BENCH_DIR/decode-$kind-$count-$levels
    [[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --levels "$levels" --progress off >/dev/null
    mkdir -p "$m/$kind-$levels"
    fusermount3 -u "$m/$kind-$levels" 2>/dev/null || true
    "$bin" mount "$store" "$m/$kind-$levels" -o scan_group=full
    mounted+=("$m/$kind-$levels")
    "$bin" inspect "$store" --json >"$BENCH_DIR/decode-$kind-$levels.inspect.json"
    "$bin" quality "$store" --sample "$sample" --json >"$BENCH_DIR/decode-$kind-$levels.quality.json"
  done
  trees=("source=$src")
  for levels in pcr fast; do
    d=$m/$kind-$levels
    trees+=("$levels-L1=$d/.fidelity/sg/1" "$levels-L5=$d/.fidelity/sg/5" "$levels-full=$d")
  done
  /usr/bin/python3 "$root/scripts/bench/decode_loader.py" "${trees[@]}" --runs "$runs" \
    --json "$BENCH_DIR/results/decode-$kind.json"
  echo
  /usr/bin/python3 "$root/scripts/bench/level_curves.py" \
    pcr "$BENCH_DIR/decode-$kind-pcr.quality.json" "$BENCH_DIR/decode-$kind-pcr.inspect.json" \
    fast "$BENCH_DIR/decode-$kind-fast.quality.json" "$BENCH_DIR/decode-$kind-fast.inspect.json"
  for levels in pcr fast; do fusermount3 -u "$m/$kind-$levels"; done
  mounted=()
done
echo
echo "Goals: full level bytes <= 1.01x pcr's, MS-SSIM curve nowhere below pcr's; DataLoader images/s"
echo "at full level >= 0.8x the source's, at level 5 >= 1.0x (fast-full and fast-L5 against source)."
