#!/usr/bin/env bash
# Cold random epochs from a local store on an unthrottled disk: what DataLoader(ImageFolder(mount),
# shuffle=True) gets, against the source tree on ext4 read in the same order. Same tree, same
# reader (readbench, THREADS threads, the same seeded order for every contender of a run), same
# run; every run cold (page cache dropped, a fresh daemon). Contenders take turns within a run
# (a different one first each run); figures are medians of RUNS runs, ratios medians of the
# per-run ratios.
#   ext4 random      the source tree, random order
#   fid records      the mount at full level, random_reads=auto (which must pick records: CACHE
#                    holds the store), the same order
#   fid pieces       the mount with random_reads=pieces (each file's own pieces), the same order
# Storage bytes: /proc/PID/io read_bytes of the process that reads storage (the reader for ext4,
# the daemon for the mount). Needs root (drop_caches, mounts).
#   scripts/bench/random.sh [COUNT=5000] [RUNS=3] [KIND=imagenet]   env: THREADS=8 CACHE=1GiB
source "$(dirname "$0")/common.sh"
count=${1:-5000}
runs=${2:-3}
kind=${3:-imagenet}
threads=${THREADS:-8}
cache=${CACHE:-1GiB}
[[ $EUID == 0 ]] || { echo "random.sh: needs root (drop_caches, mounts)" >&2; exit 2; }
BUILD_TARGETS="fidelityfs readbench" bench_setup
rb=$root/build/scripts/bench/readbench
src=$(make_dataset "$kind" "$count" 20)
store=$BENCH_DIR/random-store-$kind-$count
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --progress off --jobs 2 >/dev/null
m=$BENCH_DIR/random-mnt
mkdir -p "$m"
fusermount3 -u "$m" 2>/dev/null || true
trap 'fusermount3 -u "$m" 2>/dev/null || true' EXIT
(cd "$src" && find . -name '*.JPEG' | sort | sed 's|^\./||') >"$BENCH_DIR/random.list.rel"
n=$(wc -l <"$BENCH_DIR/random.list.rel")

# Each run prints "images/s served_bytes storage_bytes mode".
run_ext4() {  # SEED
  local out
  sed "s|^|$src/|" "$BENCH_DIR/random.list.rel" >"$BENCH_DIR/random.list.ext4"
  cold
  out=$("$rb" "$BENCH_DIR/random.list.ext4" --threads "$threads" --seed "$1")
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $(field "$out" read_bytes) -"
}
run_mount() {  # RANDOM_READS SEED
  local pid out b0 b1 mode
  "$bin" mount "$store" "$m" -o "cache=$cache,random_reads=$1"
  pid=$(daemon_pid "$m" "$store")
  sed "s|^|$m/|" "$BENCH_DIR/random.list.rel" >"$BENCH_DIR/random.list.mount"
  cold
  b0=$(read_bytes "$pid")
  out=$("$rb" "$BENCH_DIR/random.list.mount" --threads "$threads" --seed "$2")
  b1=$(read_bytes "$pid")
  mode=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["random_reads"]["mode"])' \
    "$m/.fidelity/stats")
  fusermount3 -u "$m"
  wait_exit "$pid"
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $((b1 - b0)) $mode"
}

declare -A R=()
names=("ext4 random" "fid records" "fid pieces")
for ((r = 1; r <= runs; r++)); do
  for ((i = 0; i < ${#names[@]}; i++)); do
    name=${names[$(((i + r - 1) % ${#names[@]}))]}
    case $name in
      "ext4 random") line=$(run_ext4 "$r") ;;
      "fid records") line=$(run_mount auto "$r") ;;
      "fid pieces") line=$(run_mount pieces "$r") ;;
    esac
    read -r a b c d <<<"$line"
    R[$name,fps]+="$a " R[$name,served]+="$b " R[$name,storage]+="$c " R[$name,mode]+="$d "
    echo "run $r: $name: $line" >&2
  done
done
src_b=$(find "$src" -name '*.JPEG' -printf '%s\n' | awk '{s += $1} END {print s}')
printf '\nrandom benchmark: %d %s JPEGs (%.0f B on average), local store on an unthrottled disk (%s), %d reader threads,\n' \
  "$n" "$kind" "$(x "$src_b / $n")" "$(findmnt -no SOURCE -T "$store")" "$threads"
printf 'one seeded random order per run for every contender, page cache dropped and a fresh daemon every run, cache %s; median of %d runs\n' \
  "$cache" "$runs"
printf '%-12s %10s %16s %16s %10s %14s\n' config images/s "served B/image" "storage B/image" "vs ext4" mode
for name in "${names[@]}"; do
  q=1
  [[ $name == "ext4 random" ]] || q=$(ratio "$name" "ext4 random")
  printf '%-12s %10.0f %16.0f %16.0f %9.2fx %14s\n' "$name" "$(med "$name" fps)" "$(x "$(med "$name" served) / $n")" \
    "$(x "$(med "$name" storage) / $n")" "$q" "$(echo ${R[$name,mode]})"
done
q=$(ratio "fid records" "ext4 random")
printf '\ngoal: a cold random epoch (records) >= 1.0x ext4 in the same order: measured %.2fx -> %s\n' "$q" \
  "$(met "$q >= 1.0")"
