#!/usr/bin/env bash
# L3 against PNG on two sets, each figure next to its baseline from the same run:
#  - photos: a Cityscapes-like set of 1920x1080 RGB PNGs (make_imagefolder.py --kind fhd-png);
#  - graphics: the graphics-like set of make_graphics_set.py (wallpapers and SVG renders with
#    gradients and flat art, RGBA/palette art and icons, Xvfb screenshots; 66 files).
# Both are PNGs written by PIL at zlib level 6. Per set:
#  1. bytes: L3 (the encoder's default) vs the PNG files vs cwebp -lossless;
#  2. single-thread decode MB/s: L3 vs libspng vs libpng, and a lossless check of every file
#     (build/scripts/bench/l3_codec_bench);
# then, on the photo set only,
#  3. images/s of loading each image into a numpy array with 2 threads, cold page cache:
#     PIL decoding the PNG source from ext4, vs the mount's decoded view (PNG view through PIL,
#     NPY view through np.load). Needs root (drop_caches, mounts).
#   scripts/bench/l3.sh [COUNT=40] [RUNS=3]
source "$(dirname "$0")/common.sh"
count=${1:-40}
runs=${2:-3}
bench_setup
src=$(make_dataset fhd-png "$count" 3)
gfx=$BENCH_DIR/graphics
if [[ ! -f $gfx/.done ]]; then
  rm -rf "$gfx"
  /usr/bin/python3 "$root/scripts/bench/make_graphics_set.py" --out "$gfx" >&2
  touch "$gfx/.done"
fi
store=$BENCH_DIR/store-fhd-png-$count
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --progress off >/dev/null
py=/usr/bin/python3

# cwebp -lossless bytes of every PNG of a folder (cached)
webp_bytes() {
  local dir=$1 out=$BENCH_DIR/webp-$(echo "$1" | md5sum | cut -c1-12)
  if [[ ! -f $out/.done ]]; then
    rm -rf "$out" && mkdir -p "$out"
    find "$dir" -name '*.png' | sort | xargs -P 2 -I{} sh -c 'cwebp -quiet -lossless "$1" -o "$2/$(echo "$1" | md5sum | cut -c1-16).webp"' _ {} "$out"
    touch "$out/.done"
  fi
  find "$out" -name '*.webp' -printf '%s\n' | awk '{s+=$1} END {print s}'
}
# value KEY SUMMARY_LINE
value() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
ratio() { echo "$1 / $2" | bc -l; }
goal() { if (($(echo "$1 $2 $3" | bc -l))); then echo met; else echo "NOT met"; fi; }

declare -A S W
for set in photos graphics; do
  dir=$src
  [[ $set == graphics ]] && dir=$gfx
  S[$set]=$("$root/build/scripts/bench/l3_codec_bench" --variants default --reps 3 "$dir" 2>/dev/null | grep '^summary')
  W[$set]=$(webp_bytes "$dir")
done

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
    cold
    out=$($py "$root/scripts/bench/l3_read.py" "$BENCH_DIR/l3list.$name" "${how[$name]}" 2)
    ips[$name]+="$(field "$out" images_per_s) "
  done
done
for name in "${order[@]}"; do ips[$name]=$(echo ${ips[$name]} | tr ' ' '\n' | median); done

printf '\nL3 benchmark: photos = %d fhd-png images (1920x1080 RGB), graphics = %d graphics-like images\n' \
  "$(value files "${S[photos]}")" "$(value files "${S[graphics]}")"
printf '\nbytes (vs the PNG files)  %14s %14s %9s %9s %10s\n' "PNG total" "L3 total" "L3/PNG" "median" "cwebp/PNG"
for set in photos graphics; do
  s=${S[$set]}
  printf '  %-22s %14.0f %14.0f %9.3f %9.3f %10.3f\n' "$set" "$(value png_bytes "$s")" "$(value l3_bytes "$s")" \
    "$(ratio "$(value l3_bytes "$s")" "$(value png_bytes "$s")")" "$(value median "$s")" \
    "$(ratio "${W[$set]}" "$(value png_bytes "$s")")"
done
printf '\nsingle-thread decode (decoded MB/s, best of 3 per image)\n'
printf '  %-22s %9s %9s %9s %11s %10s %9s\n' "" L3 libspng libpng "L3/libspng" "L3/libpng" lossless
for set in photos graphics; do
  s=${S[$set]}
  printf '  %-22s %9.0f %9.0f %9.0f %10.2fx %9.2fx %5d/%d\n' "$set" "$(value l3_mbs "$s")" "$(value spng_mbs "$s")" \
    "$(value libpng_mbs "$s")" "$(ratio "$(value l3_mbs "$s")" "$(value spng_mbs "$s")")" \
    "$(ratio "$(value l3_mbs "$s")" "$(value libpng_mbs "$s")")" "$(value lossless "$s")" "$(value files "$s")"
done
printf '\ngoals (issue #15)\n'
for set in photos graphics; do
  s=${S[$set]}
  r=$(ratio "$(value l3_bytes "$s")" "$(value png_bytes "$s")")
  lim=1.05
  [[ $set == graphics ]] && lim=1.10
  sp=$(ratio "$(value l3_mbs "$s")" "$(value spng_mbs "$s")")
  printf '  %-9s bytes %.3fx PNG <= %s: %s; decode %.2fx libspng >= 5: %s; lossless %s/%s: %s\n' "$set" "$r" "$lim" \
    "$(goal "$r" '<=' "$lim")" "$sp" "$(goal "$sp" '>=' 5)" "$(value lossless "$s")" "$(value files "$s")" \
    "$(goal "$(value lossless "$s")" '==' "$(value files "$s")")"
done
printf '\nload into numpy, 2 threads, cold cache, median of %d runs (images/s)\n' "$runs"
printf '  PIL decode of the PNG source (ext4)  %8.1f\n' "${ips[ext4]}"
printf '  mount, PNG view through PIL          %8.1f   (%.2fx)\n' "${ips[png]}" "$(echo "${ips[png]} / ${ips[ext4]}" | bc -l)"
printf '  mount, NPY view through np.load      %8.1f   (%.2fx)\n' "${ips[npy]}" "$(echo "${ips[npy]} / ${ips[ext4]}" | bc -l)"
