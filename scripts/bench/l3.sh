#!/usr/bin/env bash
# L3 against PNG on a Cityscapes-like set of 1920x1080 PNGs:
#  1. bytes: the L3 payloads of the store vs the PNG sources vs cwebp -lossless;
#  2. single-thread decode MB/s: L3 vs libpng vs libspng (build/scripts/bench/l3_codec_bench);
#  3. images/s of loading each image into a numpy array with 2 threads, cold page cache:
#     PIL decoding the PNG source from ext4, vs the mount's decoded view (PNG view through PIL,
#     NPY view through np.load). Needs root (drop_caches, mounts).
#   scripts/bench/l3.sh [COUNT=60] [RUNS=3]
source "$(dirname "$0")/common.sh"
count=${1:-60}
runs=${2:-3}
bench_setup
src=$(make_dataset fhd-png "$count" 3)
store=$BENCH_DIR/store-fhd-png-$count
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --progress off >/dev/null
py=/usr/bin/python3

# 1. bytes
png_bytes=$(find "$src" -name '*.png' -printf '%s\n' | awk '{s+=$1} END {print s}')
l3_bytes=$($py - "$store" <<'PY'
import sqlite3, struct, sys
db = sqlite3.connect(f"file:{sys.argv[1]}/index.sqlite?mode=ro", uri=True)
print(sum(struct.unpack_from("<QII", p)[1] for k, p in db.execute("SELECT kind, pieces FROM files") if k == 1))
PY
)
webp_dir=$BENCH_DIR/webp-$count
if [[ ! -f $webp_dir/.done ]]; then
  rm -rf "$webp_dir" && mkdir -p "$webp_dir"
  find "$src" -name '*.png' | sort | xargs -P 2 -I{} sh -c 'cwebp -quiet -lossless "$1" -o "$2/$(echo "$1" | md5sum | cut -c1-16).webp"' _ {} "$webp_dir"
  touch "$webp_dir/.done"
fi
webp_bytes=$(find "$webp_dir" -name '*.webp' -printf '%s\n' | awk '{s+=$1} END {print s}')

# 2. codec speed
codec=$("$root/build/scripts/bench/l3_codec_bench" --variants default --reps 3 "$src" 2>/dev/null)
l3_mbs=$(echo "$codec" | sed -n 's/.*: L3 \([0-9]*\) MB\/s, libspng \([0-9]*\) MB\/s.*/\1/p')
spng_mbs=$(echo "$codec" | sed -n 's/.*: L3 \([0-9]*\) MB\/s, libspng \([0-9]*\) MB\/s.*/\2/p')
libpng_mbs=$(echo "$codec" | sed -n 's/.*libpng \([0-9]*\) MB\/s (L3.*/\1/p')

# 3. loading into numpy through the mount
m=$BENCH_DIR/mnt-l3
mkdir -p "$m/png" "$m/npy"
cleanup() { for d in png npy; do fusermount3 -u "$m/$d" 2>/dev/null || true; done; }
trap cleanup EXIT
cleanup
"$bin" mount "$store" "$m/png"
"$bin" mount "$store" "$m/npy" -o raw_format=npy
(cd "$src" && find . -name '*.png' | sort) >"$BENCH_DIR/l3list.rel"
sed "s|^\.|$src|" "$BENCH_DIR/l3list.rel" >"$BENCH_DIR/l3list.ext4"
sed "s|^\.|$m/png|" "$BENCH_DIR/l3list.rel" >"$BENCH_DIR/l3list.png"
sed "s|^\.|$m/npy|" "$BENCH_DIR/l3list.rel" >"$BENCH_DIR/l3list.npy"
field() { $py -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
declare -A ips
order=(ext4 png npy)
declare -A how=([ext4]=pil [png]=pil [npy]=npy)
for ((r = 1; r <= runs; r++)); do
  for name in "${order[@]}"; do
    sync
    echo 3 >/proc/sys/vm/drop_caches
    out=$($py "$root/scripts/bench/l3_read.py" "$BENCH_DIR/l3list.$name" "${how[$name]}" 2)
    ips[$name]+="$(field "$out" images_per_s) "
  done
done
for name in "${order[@]}"; do ips[$name]=$(echo ${ips[$name]} | tr ' ' '\n' | median); done

n=$(wc -l <"$BENCH_DIR/l3list.rel")
printf '\nL3 benchmark: %d fhd-png images (1920x1080 RGB)\n' "$n"
printf '\nbytes              %14s %10s\n' total "vs PNG"
printf '  PNG sources      %14d %10.3f\n' "$png_bytes" 1
printf '  L3 (store)       %14d %10.3f\n' "$l3_bytes" "$(echo "$l3_bytes / $png_bytes" | bc -l)"
printf '  cwebp -lossless  %14d %10.3f\n' "$webp_bytes" "$(echo "$webp_bytes / $png_bytes" | bc -l)"
printf '\nsingle-thread decode (decoded MB/s, best of 3 per image)\n'
printf '  L3       %8s\n  libpng   %8s   (L3 %.2fx)\n  libspng  %8s   (L3 %.2fx)\n' "$l3_mbs" "$libpng_mbs" \
  "$(echo "$l3_mbs / $libpng_mbs" | bc -l)" "$spng_mbs" "$(echo "$l3_mbs / $spng_mbs" | bc -l)"
printf '\nload into numpy, 2 threads, cold cache, median of %d runs (images/s)\n' "$runs"
printf '  PIL decode of the PNG source (ext4)  %8.1f\n' "${ips[ext4]}"
printf '  mount, PNG view through PIL          %8.1f   (%.2fx)\n' "${ips[png]}" "$(echo "${ips[png]} / ${ips[ext4]}" | bc -l)"
printf '  mount, NPY view through np.load      %8.1f   (%.2fx)\n' "${ips[npy]}" "$(echo "${ips[npy]} / ${ips[ext4]}" | bc -l)"
