#!/usr/bin/env bash
# Cold epochs on throttled storage: images/s and storage bytes per image, same tree, same reader,
# same run. Every run starts cold (page cache dropped, a fresh daemon) and the process that reads
# storage (the reader for ext4, the daemon for the mount) sits in a cgroup-v1 blkio group whose
# reads are limited to LIMIT bytes/s on the disk holding the data. Storage bytes come from
# /proc/PID/io read_bytes (the daemon's, or the reader's); served bytes from the reader.
#   ext4 random      the source tree, random order
#   mount random     the mount at full level, random order (an ImageFolder shuffle)
#   order L1/L5/full the mount at level 1, 5, full, in its published order (.fidelity/order/epoch-N)
# Needs root (drop_caches, cgroups, mounts).
#   scripts/bench/cold.sh [COUNT=5000] [RUNS=3] [LIMIT=100000000] [THREADS=8]   env: CACHE=256MiB FILE=0|1
source "$(dirname "$0")/common.sh"
count=${1:-5000}
runs=${2:-3}
limit=${3:-100000000}
threads=${4:-8}
cache=${CACHE:-256MiB}
bench_setup
rb=$root/build/scripts/bench/readbench
src=$(make_dataset imagenet "$count" 20)
store=$BENCH_DIR/cold-store-$count
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --progress off --jobs 2 >/dev/null
# FILE=1: the same source in the file layout too (same seed, so the same records), its published
# order at level 5 and full level beside the scan layout's.
file_store=$BENCH_DIR/cold-store-file-$count
if [[ ${FILE:-0} == 1 && ! -f $file_store/index.sqlite ]]; then
  "$bin" pack "$src" "$file_store" --layout file --progress off --jobs 2 >/dev/null
fi

dev=$(findmnt -no MAJ:MIN -T "$store" | tr -d ' ')
[[ $(findmnt -no MAJ:MIN -T "$src" | tr -d ' ') == "$dev" ]] || { echo "source and store must be on one disk" >&2; exit 1; }
cg=/sys/fs/cgroup/blkio/fidelityfs-cold
mkdir -p "$cg"
echo "$dev $limit" >"$cg/blkio.throttle.read_bps_device"

m=$BENCH_DIR/cold-mnt
mkdir -p "$m"
cleanup() {
  fusermount3 -u "$m" 2>/dev/null || true
  echo "$dev 0" >"$cg/blkio.throttle.read_bps_device" 2>/dev/null || true
  rmdir "$cg" 2>/dev/null || true
}
trap cleanup EXIT
fusermount3 -u "$m" 2>/dev/null || true

(cd "$src" && find . -name '*.JPEG' | sort | sed 's|^\./||') >"$BENCH_DIR/cold.list.rel"
n=$(wc -l <"$BENCH_DIR/cold.list.rel")

# run_ext4 SEED -> "files_per_s served_bytes storage_bytes rss_kb"
run_ext4() {
  sed "s|^|$src/|" "$BENCH_DIR/cold.list.rel" >"$BENCH_DIR/cold.list.ext4"
  cold
  # The reader joins the cgroup and reports its own /proc/self/io read_bytes.
  local out
  out=$(bash -c 'echo $BASHPID >"$1/cgroup.procs"; exec "$2" "$3" --threads "$4" --seed "$5"' \
    _ "$cg" "$rb" "$BENCH_DIR/cold.list.ext4" "$threads" "$1")
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $(field "$out" read_bytes) -"
}

hz=$(getconf CLK_TCK)

# run_mount LEVEL MODE(random|order) EPOCH [STORE] -> "files_per_s served_bytes storage_bytes rss_kb index_rss_kb cpu_us_per_image"
run_mount() {
  local level=$1 mode=$2 epoch=$3 store=${4:-$store} pid list=$BENCH_DIR/cold.list.mount
  "$bin" mount "$store" "$m" -o "scan_group=$level,cache=$cache"
  pid=$(daemon_pid "$m" "$store")
  echo "$pid" >"$cg/cgroup.procs"
  if [[ $mode == order ]]; then
    sed "s|^|$m/|" "$m/.fidelity/order/epoch-$epoch" >"$list"
    args=(--in-order)
  else
    sed "s|^|$m/|" "$BENCH_DIR/cold.list.rel" >"$list"
    args=(--seed "$epoch")
  fi
  local rss0 b0 b1 out rss c0 c1
  rss0=$(kb "$pid" VmRSS)
  cold
  b0=$(read_bytes "$pid")
  c0=$(cpu_ticks "$pid")
  out=$("$rb" "$list" --threads "$threads" "${args[@]}")
  c1=$(cpu_ticks "$pid")
  b1=$(read_bytes "$pid")
  rss=$(kb "$pid" VmHWM)
  cat "$m/.fidelity/stats" >"$BENCH_DIR/cold.stats.$level.$mode.json"  # one open: a snapshot of an uncached name may be replaced between stat and open
  fusermount3 -u "$m"
  wait_exit "$pid"  # the daemon exits after the unmount
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $((b1 - b0)) $rss $rss0 $(echo "($c1 - $c0) * 1000000 / $hz / $n" | bc -l)"
}

declare -A fps served storage rss rss0 cpu
names=("ext4 random" "mount random" "order L1" "order L5" "order full")
[[ ${FILE:-0} == 1 ]] && names+=("file order L5" "file order full")
for name in "${names[@]}"; do
  f=() s=() t=() r=() r0=() u=()
  for ((i = 1; i <= runs; i++)); do
    case $name in
      "ext4 random") line=$(run_ext4 "$i") ;;
      "mount random") line=$(run_mount full random "$i") ;;
      "order L1") line=$(run_mount 1 order "$i") ;;
      "order L5") line=$(run_mount 5 order "$i") ;;
      "order full") line=$(run_mount full order "$i") ;;
      "file order L5") line=$(run_mount 5 order "$i" "$file_store") ;;
      "file order full") line=$(run_mount full order "$i" "$file_store") ;;
    esac
    read -r a b c d e g <<<"$line"
    f+=("$a") s+=("$b") t+=("$c") r+=("$d") r0+=("${e:--}") u+=("${g:--}")
  done
  fps[$name]=$(printf '%s\n' "${f[@]}" | median)
  served[$name]=$(printf '%s\n' "${s[@]}" | median)
  storage[$name]=$(printf '%s\n' "${t[@]}" | median)
  rss[$name]=$(printf '%s\n' "${r[@]}" | sort -g | tail -1)
  rss0[$name]=$(printf '%s\n' "${r0[@]}" | sort -g | tail -1)
  [[ ${u[0]} == - ]] && cpu[$name]=- || cpu[$name]=$(printf '%s\n' "${u[@]}" | median)
done

budget=$(/usr/bin/python3 -c "import json; print(json.load(open('$BENCH_DIR/cold.stats.full.order.json'))['cache']['budget'])")
printf '\ncold benchmark: %d ImageNet-like JPEGs, reads limited to %.0f MB/s (blkio, %s), %d reader threads,\n' \
  "$n" "$(echo "$limit / 1000000" | bc -l)" "$dev" "$threads"
printf 'page cache dropped and a fresh daemon every run, cache budget %s; median of %d runs\n' "$cache" "$runs"
# daemon CPU: the daemon's user+sys time over the run, per image (the reader's is not in it).
printf '%-14s %10s %16s %16s %14s %16s %18s\n' config images/s "storage B/image" "served B/image" "storage/served" "daemon RSS peak" "daemon CPU us/image"
for name in "${names[@]}"; do
  sb=$(echo "${storage[$name]} / $n" | bc -l)
  vb=$(echo "${served[$name]} / $n" | bc -l)
  r=${rss[$name]}
  [[ $r == - ]] && r="-" || r="$(echo "$r / 1024" | bc) MiB"
  c=${cpu[$name]}
  [[ $c == - ]] || c=$(printf '%.1f' "$c")
  printf '%-14s %10.0f %16.0f %16.0f %14.2f %16s %18s\n' "$name" "${fps[$name]}" "$sb" "$vb" "$(echo "$sb / $vb" | bc -l)" "$r" "$c"
done
printf '\ngoals:\n'
printf '  published order, full level vs ext4 random: %.2fx images/s (goal >= 1.0)\n' \
  "$(x "${fps[order full]} / ${fps[ext4 random]}")"
for k in L1 L5; do
  sp=$(x "${fps[order $k]} / ${fps[order full]}")
  ratio=$(x "${served[order full]} / ${served[order $k]}")
  printf '  order %s over full: %.2fx images/s, bytes ratio %.2fx -> %.2f of ideal (goal >= 0.9)\n' \
    "$k" "$sp" "$ratio" "$(x "$sp / $ratio")"
done
if [[ ${FILE:-0} == 1 ]]; then
  for k in L5 full; do
    printf '  file layout, order %s over the scan layout: %.2fx images/s (goal >= 0.9)\n' "$k" \
      "$(x "${fps[file order $k]} / ${fps[order $k]}")"
  done
fi
printf '  mount random: storage %.2fx the served (level) bytes per image (goal <= 1.3)\n' \
  "$(x "${storage[mount random]} / ${served[mount random]}")"
for name in "mount random" "order L1" "order L5" "order full"; do
  printf '  %-12s daemon RSS peak %d MiB <= index %d MiB + cache budget %d MiB: %s\n' "$name" \
    "$((${rss[$name]} / 1024))" "$((${rss0[$name]} / 1024))" "$((budget >> 20))" \
    "$([[ $((${rss[$name]} * 1024)) -le $((${rss0[$name]} * 1024 + budget)) ]] && echo yes || echo NO)"
done
