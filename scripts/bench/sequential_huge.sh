#!/usr/bin/env bash
# Sequential levels of huge JPEGs (encoding=sequential), in one run:
#   * first reads in one folder against the same files spread over one folder each: 8 concurrent
#     `cat`s of 8 distinct files, a fresh mount for each, the two layouts in turns, RUNS times;
#     goal: one folder within 15% of the spread one (the kernel serialises lookups in a folder
#     unless the daemon offers FUSE_PARALLEL_DIROPS);
#   * memory: 16 concurrent first `stat`s with sequential_memory=BUDGET; the daemon's peak RSS
#     (VmHWM) against BUDGET plus its caches; goal: peak RSS < BUDGET + cache + cache/4 (the
#     record cache and the view cache).
# The JPEGs are real photos scaled to WxH (quality 90, light noise), synthetic without ../shared.
# Needs root (mounts).
#   scripts/bench/sequential_huge.sh [W=12000] [H=9000] [RUNS=3] [BUDGET=2GiB] [LEVEL=full]
source "$(dirname "$0")/common.sh"
w=${1:-12000}
h=${2:-9000}
runs=${3:-3}
budget=${4:-2GiB}
level=${5:-full}
[[ $EUID == 0 ]] || { echo "sequential_huge.sh: needs root (mounts)" >&2; exit 2; }
BUILD_TARGETS=fidelityfs bench_setup
mnt=$BENCH_DIR/sequential-huge-mnt
mkdir -p "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; }
trap cleanup EXIT

# 16 files in one/, and the first 8 again one per folder in spread/NN/.
src=$BENCH_DIR/sequential-huge-${w}x$h
if [[ ! -f $src/.done ]]; then
  rm -rf "$src"
  photos=$("$root/../shared/datasets/fetch-photos.sh" 2>/dev/null | tail -1) || photos=''
  /usr/bin/python3 - "$src" "$w" "$h" "$photos" <<'EOF'
import glob, os, sys
import numpy as np
from PIL import Image
out, w, h, photos = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
files = sorted(glob.glob(os.path.join(photos, "*.jpg"))) if photos else []
rng = np.random.default_rng(0)
os.makedirs(f"{out}/one")
for i in range(16):
    if files:
        im = Image.open(files[i % len(files)]).convert("RGB").resize((w, h), Image.BILINEAR)
    else:
        y, x = np.mgrid[0:h, 0:w]
        im = Image.fromarray(np.stack([(x * (i + 1) // 37) % 256, (y // 11) % 256, ((x + y) // 23) % 256], -1).astype(np.uint8))
    a = np.asarray(im).astype(np.int16) + rng.integers(-6, 7, (h, w, 1), dtype=np.int16)
    im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    im.save(f"{out}/one/h{i:02d}.jpg", quality=90)
    if i < 8:
        os.makedirs(f"{out}/spread/{i:02d}")
        im.save(f"{out}/spread/{i:02d}/h{i:02d}.jpg", quality=90)
EOF
  touch "$src/.done"
fi
store=$BENCH_DIR/sequential-huge-${w}x$h.store
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --progress off >/dev/null

# first_reads FILE...: seconds for concurrent cats of FILEs on a fresh mount.
first_reads() {
  "$bin" mount "$store" "$mnt" -o "encoding=sequential,scan_group=$level" 2>/dev/null
  local t0 f
  t0=$(now)
  for f in "$@"; do cat "$mnt/$f" >/dev/null & done
  wait
  x "$(now) - $t0"
  fusermount3 -u "$mnt"
}
one=() spread=()
for i in 00 01 02 03 04 05 06 07; do one+=("one/h$i.jpg") spread+=("spread/$i/h$i.jpg"); done
declare -A R
for ((r = 0; r < runs; r++)); do
  R[one,s]+=" $(first_reads "${one[@]}")"
  R[spread,s]+=" $(first_reads "${spread[@]}")"
done
printf '## %sx%s JPEGs at level %s, encoding=sequential, 8 concurrent first reads (median of %s)\n\n' "$w" "$h" "$level" "$runs"
printf '| files | seconds | runs |\n| --- | ---: | --- |\n'
for k in one spread; do printf '| %s | %.2f |%s |\n' "$k" "$(med $k s)" "${R[$k,s]}"; done
slower=$(x "$(med one s) / $(med spread s)")
printf '\none folder / one folder each: %.3fx (goal <= 1.15: %s)\n\n' "$slower" "$(met "$slower <= 1.15")"

"$bin" mount "$store" "$mnt" -o "encoding=sequential,scan_group=$level,sequential_memory=$budget" 2>/dev/null
pid=$(daemon_pid "$mnt" "$store")
t0=$(now)
for i in $(seq -w 0 15); do stat -c %s "$mnt/one/h$i.jpg" >/dev/null & done
wait
secs=$(x "$(now) - $t0")
peak_kb=$(kb "$pid" VmHWM)
stats=$mnt/.fidelity/stats
budget_b=$(json_get "$stats" sequential_memory.budget)
views_b=$(json_get "$stats" l3_views.budget)
cache_b=$(json_get "$stats" cache.budget)
printf '## 16 concurrent first stats, sequential_memory=%s: %.1f s\n\n' "$budget" "$secs"
printf '| what | MiB |\n| --- | ---: |\n'
printf '| daemon peak RSS (VmHWM) | %d |\n' $((peak_kb / 1024))
printf '| budget | %d |\n' $((budget_b >> 20))
printf '| record cache budget (cache) | %d |\n' $((cache_b >> 20))
printf '| view cache budget (cache/4) | %d |\n' $((views_b >> 20))
printf '| claimed at once, peak | %d |\n' $(($(json_get "$stats" sequential_memory.peak) >> 20))
printf '| re-encodings that waited | %s |\n' "$(json_get "$stats" sequential_memory.waits)"
limit_kb=$(((budget_b + cache_b + views_b) / 1024))
printf '\npeak RSS < budget + caches: %s\n' "$(met "$peak_kb < $limit_kb")"
