#!/usr/bin/env bash
# Random reads beyond RAM: cold random epochs (an ImageFolder shuffle) from stores larger than the
# mount's memory cache, in the two record layouts, against the source tree on ext4 read in the
# same order. Same tree, same reader (readbench, THREADS threads, one seeded order per run for
# every contender), same run; every run cold (page cache dropped, a fresh daemon). Contenders take
# turns within a run (a different one first each run); figures are medians of RUNS runs, ratios
# medians of the per-run ratios.
#   ext4        the source tree (ImageNet-sized JPEGs, ~107 KB each), random order
#   scan full   the store packed with --layout scan (a JPEG at level k is k+1 pieces in k+1
#   scan L5     regions of its record: k+1 disk reads when its record is not cached), at full
#               fidelity and at level 5 (-o scan_group=full|5)
#   file full   the store packed with --layout file (a JPEG's pieces back to back: one disk read
#   file L5     at any level), the same levels
# Both stores come from the same source with the same seed. Every mount: -o cache=CACHE (smaller
# than the store), random_reads left at auto; the mode it picks (/.fidelity/stats) is reported.
# Part 1, an IOPS-limited volume (an EBS gp3 baseline): the daemon and the reader run in a
# cgroup-v1 blkio group limited to IOPS reads/s and BPS bytes/s on the disk holding the data,
# both started inside it (the mount's shell joins the group before it execs the mount, so the
# daemon and its io_uring workers are in it from their start).
# Part 2, the local disk unthrottled: the same contenders, the same group with no limits (it is
# still how the daemon is found and the requests to the disk are counted).
# Storage bytes: /proc/PID/io read_bytes of the process that reads the disk (the daemon, or the
# reader for ext4); disk reads: the read requests the group sent to the disk
# (blkio.throttle.io_serviced). blk-throttle lets one slice (100 ms) of the limits through at
# once, so that runs under a second or so (a few hundred files) overstate what the limits allow;
# at COUNT=3000 a contender reads for seconds. Needs root (drop_caches, cgroups, mounts).
#   scripts/bench/beyond_ram.sh [COUNT=3000] [RUNS=3]
#   options: --part 1|2|all (default: env PARTS, else all)
#   env: THREADS=8 CACHE=32MiB IOPS=3000 BPS=131072000 (125 MiB/s) BENCH_NO_BUILD=1 (build/ as it is)
source "$(dirname "$0")/common.sh"
shopt -s inherit_errexit  # a failed mount or read inside $(...) stops the benchmark
usage() { sed -n '/^#   scripts\/bench\/beyond_ram.sh/,/^[^#]/s/^#   //p' "$0" >&2; exit 2; }
parts=${PARTS:-all}
pos=()
while (($#)); do
  case $1 in
    --part) (($# >= 2)) || usage; parts=$2; shift 2 ;;
    --part=*) parts=${1#--part=}; shift ;;
    -h | --help) usage ;;
    -*) usage ;;
    *) pos+=("$1"); shift ;;
  esac
done
((${#pos[@]} <= 2)) || usage
count=${pos[0]:-3000}
runs=${pos[1]:-3}
case $parts in 1 | 2 | all) ;; *) usage ;; esac
threads=${THREADS:-8}
cache=${CACHE:-32MiB}
iops=${IOPS:-3000}
bps=${BPS:-131072000}
[[ $EUID == 0 ]] || { echo "beyond_ram.sh: needs root (drop_caches, cgroups, mounts)" >&2; exit 2; }
BUILD_TARGETS="fidelityfs readbench" bench_setup
rb=$root/build/scripts/bench/readbench
[[ -x $rb ]] || { echo "beyond_ram.sh: $rb is missing (BUILD_TARGETS=readbench scripts/build.sh)" >&2; exit 1; }

src=$(make_dataset imagenet-sized "$count" 20)
layouts=(scan file)
declare -A store=()
# store_layout STORE: the layout a store was packed with (stores made before layouts: scan).
store_layout() { "$bin" inspect --json "$1" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get("layout", "scan"))'; }
for layout in "${layouts[@]}"; do
  store[$layout]=$BENCH_DIR/beyond-ram-store-$layout-$count
  if [[ -f ${store[$layout]}/index.sqlite && $(store_layout "${store[$layout]}") != "$layout" ]]; then
    rm -rf "${store[$layout]}"  # a cached store of another layout
  fi
  [[ -f ${store[$layout]}/index.sqlite ]] ||
    "$bin" pack "$src" "${store[$layout]}" --layout "$layout" --seed 0 --progress off --jobs 2 >/dev/null
done
dev=$(disk_of "$src")
for layout in "${layouts[@]}"; do
  [[ $(disk_of "${store[$layout]}") == "$dev" ]] || { echo "beyond_ram.sh: source and stores must be on one disk" >&2; exit 1; }
done

cg=/sys/fs/cgroup/blkio/fidelityfs-beyond-ram
m=$BENCH_DIR/beyond-ram-mnt
limits() {  # IOPS BPS (0 0: none)
  echo "$dev $1" >"$cg/blkio.throttle.read_iops_device"
  echo "$dev $2" >"$cg/blkio.throttle.read_bps_device"
}
cleanup() {
  fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true
  [[ -d $cg ]] || return 0
  limits 0 0 2>/dev/null || true
  remove_cgroup "$cg" && return 0
  echo "beyond_ram.sh: could not remove $cg (left in it: $(paste -sd' ' "$cg/cgroup.procs"))" >&2
}
mkdir -p "$m"
fusermount3 -u "$m" 2>/dev/null || true
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$cg"
limits 0 0

lists=$BENCH_DIR/beyond-ram-lists
mkdir -p "$lists"
(cd "$src" && find . -name '*.JPEG' | sort | sed 's|^\./||') >"$lists/rel"
sed "s|^|$src/|" "$lists/rel" >"$lists/ext4"
sed "s|^|$m/|" "$lists/rel" >"$lists/mount"
n=$(wc -l <"$lists/rel")

# cg_reads: the read requests the group has sent to the disk so far.
cg_reads() { awk -v d="$dev" '$1 == d && $2 == "Read" {r = $3} END {print r + 0}' "$cg/blkio.throttle.io_serviced"; }
# group_daemon_pid: the mount's daemon, the one process left in the group once `mount` has
# returned (named apart from common.sh's daemon_pid, which finds it by its command line).
group_daemon_pid() {
  local -a procs
  mapfile -t procs <"$cg/cgroup.procs"
  if ((${#procs[@]} != 1)) || [[ $(cat "/proc/${procs[0]}/comm") != fidelityfs ]]; then
    echo "beyond_ram.sh: expected the mount's daemon alone in $cg, found: ${procs[*]}" >&2
    return 1
  fi
  echo "${procs[0]}"
}

# Each run prints "files/s served_bytes storage_bytes disk_reads mode".
run_ext4() {  # SEED
  local out q0
  cold
  q0=$(cg_reads)
  out=$(in_cgroup "$cg" "$rb" "$lists/ext4" --threads "$threads" --seed "$1")
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $(field "$out" read_bytes) $(($(cg_reads) - q0)) -"
}
run_mount() {  # LAYOUT LEVEL SEED
  local pid out b0 b1 q0 q1
  in_cgroup "$cg" "$bin" mount "${store[$1]}" "$m" -o "cache=$cache,scan_group=$2"
  pid=$(group_daemon_pid)
  cold
  b0=$(read_bytes "$pid")
  q0=$(cg_reads)
  out=$(in_cgroup "$cg" "$rb" "$lists/mount" --threads "$threads" --seed "$3")
  b1=$(read_bytes "$pid")
  q1=$(cg_reads)
  cp "$m/.fidelity/stats" "$BENCH_DIR/beyond-ram.stats.json"
  fusermount3 -u "$m"
  wait_exit "$pid"
  echo "$(field "$out" files_per_s) $(field "$out" bytes) $((b1 - b0)) $((q1 - q0))" \
    "$(json_get "$BENCH_DIR/beyond-ram.stats.json" random_reads.mode)"
}

names=("ext4" "scan full" "scan L5" "file full" "file L5")
declare -A R=() json=() text=()
budget=''
run_part() {  # PART
  local p=$1 r i name line a b c d e layout level
  R=()
  if ((p == 1)); then limits "$iops" "$bps"; else limits 0 0; fi
  for ((r = 1; r <= runs; r++)); do
    for ((i = 0; i < ${#names[@]}; i++)); do
      name=${names[$(((i + r - 1) % ${#names[@]}))]}
      if [[ $name == ext4 ]]; then
        line=$(run_ext4 "$r")
      else
        read -r layout level <<<"$name"
        line=$(run_mount "$layout" "${level#L}" "$r")
        [[ -n $budget ]] || budget=$(json_get "$BENCH_DIR/beyond-ram.stats.json" cache.budget)
      fi
      read -r a b c d e <<<"$line"
      R[$name,fps]+="$a " R[$name,served]+="$b " R[$name,storage]+="$c " R[$name,reads]+="$d "
      [[ $e == - ]] || R[$name,mode]+="$e "
      echo "part $p run $r: $name: $line" >&2
    done
  done
  limits 0 0

  local title
  if ((p == 1)); then
    title=$(printf 'part 1, IOPS-limited volume: blkio read limits %d IOPS and %d B/s (%.0f MiB/s) on %s (%s), daemon and reader in the group' \
      "$iops" "$bps" "$(x "$bps / 1048576")" "$(findmnt -no SOURCE -T "$src")" "$dev")
  else
    title=$(printf 'part 2, unthrottled local disk: %s (%s), no limits' "$(findmnt -no SOURCE -T "$src")" "$dev")
  fi
  local q fs rd md
  text[$p]=$(
    printf '%s\n' "$title"
    printf '%-10s %9s %8s %10s %15s %11s %14s %13s\n' config files/s "vs ext4" "file/scan" "storage B/file" \
      "reads/file" "served B/file" random_reads
    for name in "${names[@]}"; do
      q=1
      [[ $name == ext4 ]] || q=$(ratio "$name" ext4)
      fs=-
      [[ $name == file* ]] && fs=$(printf '%.2fx' "$(ratio "$name" "scan ${name#file }")")
      rd=$(med "$name" reads)
      if [[ $rd == 0 ]]; then rd=-; else rd=$(printf '%.2f' "$(x "$rd / $n")"); fi
      md=$(tr ' ' '\n' <<<"${R[$name,mode]:--}" | grep . | sort -u | paste -sd/)  # the modes the runs saw
      printf '%-10s %9.0f %7.2fx %10s %15.0f %11s %14.0f %13s\n' "$name" "$(med "$name" fps)" "$q" "$fs" \
        "$(x "$(med "$name" storage) / $n")" "$rd" "$(x "$(med "$name" served) / $n")" "$md"
    done
  )
  json[$p]=$(runs_json names fps served storage reads mode)
}

for p in 1 2; do
  [[ $parts == all || $parts == "$p" ]] || continue
  run_part "$p"
done

src_b=$(find "$src" -name '*.JPEG' -printf '%s\n' | awk '{s += $1} END {print s}')
scan_b=$(du -sb "${store[scan]}" | cut -f1)
file_b=$(du -sb "${store[file]}" | cut -f1)
printf '\nbeyond_ram benchmark: %d ImageNet-sized JPEGs (%.0f B on average), %d reader threads, one seeded random order per run\n' \
  "$n" "$(x "$src_b / $n")" "$threads"
printf 'for every contender, page cache dropped and a fresh daemon every run; cache %s (%s B), stores %s B (scan), %s B (file);\n' \
  "$cache" "${budget:-?}" "$scan_b" "$file_b"
printf 'median of %d runs; ratios: medians of per-run ratios (file/scan: the file layout over the scan layout at that level);\n' "$runs"
printf 'reads/file: read requests to the disk (blkio), storage B/file: bytes the disk delivered (/proc/PID/io)\n'
for p in 1 2; do
  [[ -n ${text[$p]:-} ]] && printf '\n%s\n' "${text[$p]}"
done

mkdir -p "$BENCH_DIR/results"
{
  printf '{"benchmark": "beyond_ram", "files": %d, "runs": %d, "threads": %d, "cache": "%s", "cache_budget": %s, ' \
    "$n" "$runs" "$threads" "$cache" "${budget:-null}"
  printf '"source_bytes": %s, "store_bytes": {"scan": %s, "file": %s}, "disk": "%s"' "$src_b" "$scan_b" "$file_b" "$dev"
  [[ -n ${json[1]:-} ]] && printf ', "part1": {"read_iops": %d, "read_bps": %d, "contenders": %s}' "$iops" "$bps" "${json[1]}"
  [[ -n ${json[2]:-} ]] && printf ', "part2": {"contenders": %s}' "${json[2]}"
  printf '}\n'
} >"$BENCH_DIR/results/beyond_ram-$count.json"
echo
cat "$BENCH_DIR/results/beyond_ram-$count.json"
