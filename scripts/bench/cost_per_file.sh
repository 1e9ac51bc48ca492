#!/usr/bin/env bash
# The cost of a file: where a cold random epoch's CPU goes, per file, on this machine's disk as it
# is (no throttle). ImageNet-sized JPEGs, file layout, page cache dropped and a fresh daemon every
# run, one seeded random order per run shared by every contender, THREADS reader threads
# (readbench). Contenders take turns within a run (a different one first each run):
#   ext4              the source tree on the same disk
#   ext4 O_DIRECT     the same files read with O_DIRECT: what the disk alone delivers to 8
#                     readers, no page cache (the daemon's own way of reading)
#   disk full         the store's own ranges that the mount reads for each file, at full and at
#   disk L5           level 5, read with O_DIRECT straight from the record files by 8 readers
#                     (readbench --ranges, scripts/bench/store_ranges.py): the mount's ceiling on
#                     this disk, what its reads cost without FUSE
#   full pieces       the mount at full fidelity, a cache smaller than the store (-o cache=32MiB:
#   L5 pieces         each read fetches its file's range), and at level 5
#   full records      the same with a cache that holds the store (-o cache=4GiB: random_reads
#   L5 records        picks records, each read loads its whole record)
#   ext4 listed       the tree listed first as torchvision's ImageFolder lists it when it is
#   full listed       built (imagefolder_list.py), after the cache drop and before the epoch (not
#   L5 listed         timed): the mount's own `readdir` setting decides how many of the epoch's
#                     opens still need a LOOKUP (none with MOUNT_OPTS=readdir=plus); pieces
# Every mount contender runs under each transport (NAME @dev, NAME @uring: -o transport=), where
# the kernel has FUSE over io_uring (the script turns the fuse module's enable_uring on for the run
# and back as it was after).
# Per file: files/s (and the ratio to ext4 in the same run), the readers' CPU (readbench's
# rusage), the daemon's CPU (/proc/PID/stat utime+stime over the epoch) and context switches
# (its threads' voluntary and involuntary ones), the FUSE requests the daemon answered by
# operation (its stats' "requests"), the store reads and bytes (stats' storage_reads,
# storage_bytes). Medians of RUNS runs; ratios are medians of per-run ratios.
# With --perf, one more epoch per mount contender under `perf record -g` of the daemon, and the
# top entries of each profile (self time) are printed. Needs root (drop_caches, mounts).
#   scripts/bench/cost_per_file.sh [COUNT=10000] [RUNS=3] [--perf] [--only NAME,...]
#   env: THREADS=8 MOUNT_OPTS (more -o options for every mount) BENCH_NO_BUILD=1 (build/ as it is)
#        TRANSPORTS="dev uring" (the transports the mount contenders run under; auto too)
#        READER=readbench|threads|loader: who reads the files (readbench's C++ threads; Python
#        threads, or a torch DataLoader's worker processes, scripts/bench/py_readers.py; the
#        Python readers run no O_DIRECT or disk contender)
source "$(dirname "$0")/common.sh"
shopt -s inherit_errexit
usage() { sed -n '/^#   scripts\/bench\/cost_per_file.sh/,/^[^#]/s/^#   //p' "$0" >&2; exit 2; }
perf=0
only=''
pos=()
while (($#)); do
  case $1 in
    --perf) perf=1; shift ;;
    --only) (($# >= 2)) || usage; only=$2; shift 2 ;;
    -h | --help | -*) usage ;;
    *) pos+=("$1"); shift ;;
  esac
done
((${#pos[@]} <= 2)) || usage
count=${pos[0]:-10000}
runs=${pos[1]:-3}
threads=${THREADS:-8}
[[ $EUID == 0 ]] || { echo "cost_per_file.sh: needs root (drop_caches, mounts)" >&2; exit 2; }
BUILD_TARGETS="fidelityfs readbench" bench_setup
rb=$root/build/scripts/bench/readbench
[[ -x $rb ]] || { echo "cost_per_file.sh: $rb is missing (BUILD_TARGETS=readbench scripts/build.sh)" >&2; exit 1; }
((perf == 0)) || command -v perf >/dev/null || { echo "cost_per_file.sh: --perf needs perf (apt-get install linux-perf)" >&2; exit 2; }

src=$(make_dataset imagenet-sized "$count" 20)
store=$BENCH_DIR/cost-store-file-$count
[[ -f $store/index.sqlite ]] ||
  "$bin" pack "$src" "$store" --layout file --seed 0 --progress off --jobs 2 >/dev/null
[[ $(disk_of "$src") == $(disk_of "$store") ]] || { echo "cost_per_file.sh: source and store must be on one disk" >&2; exit 1; }

m=$BENCH_DIR/cost-mnt
mkdir -p "$m"
fusermount3 -u "$m" 2>/dev/null || true
uring_param=/sys/module/fuse/parameters/enable_uring
uring_was=$(cat "$uring_param" 2>/dev/null || echo none)
read -ra transports <<<"${TRANSPORTS:-dev uring}"
if [[ $uring_was == none && " ${transports[*]} " == *" uring "* ]]; then
  echo "cost_per_file.sh: this kernel has no FUSE over io_uring: the mounts run over /dev/fuse only" >&2
  transports=(dev)
fi
[[ $uring_was == none ]] || echo 1 >"$uring_param"
restore_uring() { [[ $uring_was == none ]] || { [[ $uring_was == Y ]] && echo 1 || echo 0; } >"$uring_param"; }
trap 'fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true; restore_uring' EXIT
trap 'exit 130' INT TERM
lists=$BENCH_DIR/cost-lists
mkdir -p "$lists"
(cd "$src" && find . -name '*.JPEG' | sort | sed 's|^\./||') >"$lists/rel"
sed "s|^|$src/|" "$lists/rel" >"$lists/ext4"
sed "s|^|$m/|" "$lists/rel" >"$lists/mount"
for level in full 5; do
  /usr/bin/python3 "$root/scripts/bench/store_ranges.py" "$store" "$level" "$lists/rel" >"$lists/ranges-$level"
done
n=$(wc -l <"$lists/rel")

# stats_counts FILE: "lookup getattr read other storage_reads storage_bytes" of a stats snapshot.
stats_counts() {
  /usr/bin/python3 - "$1" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
q = s.get("requests", {})
other = sum(v for k, v in q.items() if k not in ("lookup", "getattr", "read"))
print(q.get("lookup", 0), q.get("getattr", 0), q.get("read", 0), other, s["storage_reads"], s["storage_bytes"])
EOF
}

# Each run prints "files/s reader_us daemon_us switches lookup getattr read other store_reads
# store_bytes mode" (per file where it is a count).
lister=$root/scripts/bench/imagefolder_list.py
reader=${READER:-readbench}
# read_list LIST SEED [--direct]: one epoch over LIST by the chosen readers (readbench's JSON line).
read_list() {
  if [[ $reader == readbench ]]; then "$rb" "$1" --threads "$threads" --seed "$2" ${3:-}
  else /usr/bin/python3 "$root/scripts/bench/py_readers.py" "$1" --mode "$reader" --threads "$threads" --seed "$2"; fi
}
run_ext4() {  # SEED [--direct | listed]
  local out
  cold
  if [[ ${2:-} == listed ]]; then /usr/bin/python3 "$lister" "$src" >/dev/null; set -- "$1"; fi
  out=$(read_list "$lists/ext4" "$1" ${2:-})
  echo "$(field "$out" files_per_s) $(field "$out" cpu_us_per_file) - - - - - - - - -"
}
run_ranges() {  # LEVEL SEED
  local out
  cold
  out=$("$rb" "$lists/ranges-$1" --ranges --threads "$threads" --seed "$2")
  echo "$(field "$out" files_per_s) $(field "$out" cpu_us_per_file) - - - - - - - - -"
}
run_mount() {  # LEVEL CACHE SEED TRANSPORT [PERF_OUT] [listed]
  local pid out t0 t1 s0 s1 a b mode transport=$4
  "$bin" mount "$store" "$m" -o "cache=$2,scan_group=$1,transport=$transport${MOUNT_OPTS:+,$MOUNT_OPTS}"
  pid=$(daemon_pid "$m" "$store")
  cold
  [[ ${6:-} != listed ]] || /usr/bin/python3 "$lister" "$m" >/dev/null
  cat "$m/.fidelity/stats" >"$BENCH_DIR/cost.stats0.json"
  t0=$(cpu_ticks "$pid")
  s0=$(ctx_switches "$pid")
  if [[ -n ${5:-} ]]; then  # perf starts disabled; the epoch starts once it acknowledges "enable"
    rm -f "$BENCH_DIR/perf.ctl" "$BENCH_DIR/perf.ack"
    mkfifo "$BENCH_DIR/perf.ctl" "$BENCH_DIR/perf.ack"
    perf record -g -D -1 --control "fifo:$BENCH_DIR/perf.ctl,$BENCH_DIR/perf.ack" -o "$5" -p "$pid" 2>/dev/null &
    local perf_pid=$!
    echo enable >"$BENCH_DIR/perf.ctl"
    read -r _ <"$BENCH_DIR/perf.ack"
  fi
  out=$(read_list "$lists/mount" "$3")
  t1=$(cpu_ticks "$pid")
  s1=$(ctx_switches "$pid")
  if [[ -n ${5:-} ]]; then
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
  fi
  cat "$m/.fidelity/stats" >"$BENCH_DIR/cost.stats1.json"
  mode=$(json_get "$BENCH_DIR/cost.stats1.json" random_reads.mode)
  fusermount3 -u "$m"
  wait_exit "$pid"
  read -ra a <<<"$(stats_counts "$BENCH_DIR/cost.stats0.json")"
  read -ra b <<<"$(stats_counts "$BENCH_DIR/cost.stats1.json")"
  local hz per=() k
  hz=$(getconf CLK_TCK)
  for k in 0 1 2 3 4 5; do per+=("$(x "(${b[$k]} - ${a[$k]}) / $n")"); done
  echo "$(field "$out" files_per_s) $(field "$out" cpu_us_per_file) $(printf '%.0f' "$(x "($t1 - $t0) * 1000000 / $hz / $n")")" \
    "$(printf '%.2f' "$(x "($s1 - $s0) / $n")")" \
    "$(printf '%.4f ' "${per[@]}")$mode"
}

bases=("ext4" "ext4 O_DIRECT" "disk full" "disk L5" "full pieces" "L5 pieces" "full records" "L5 records" "ext4 listed"
  "full listed" "L5 listed")
if [[ -n $only ]]; then
  IFS=, read -ra keep <<<"$only"
  bases=(ext4 "ext4 O_DIRECT")
  for k in "${keep[@]}"; do [[ $k == ext4 || $k == "ext4 O_DIRECT" ]] || bases+=("$k"); done
fi
if [[ $reader != readbench ]]; then  # O_DIRECT and the store's ranges are readbench's alone
  kept=()
  for b in "${bases[@]}"; do [[ $b == "ext4 O_DIRECT" || $b == disk* ]] || kept+=("$b"); done
  bases=("${kept[@]}")
fi
baseline() { [[ $1 == ext4* || $1 == disk* ]]; }
names=()
for b in "${bases[@]}"; do
  if baseline "$b"; then names+=("$b"); else for t in "${transports[@]}"; do names+=("$b @$t"); done; fi
done
level_of() { [[ $1 == full* ]] && echo full || echo 5; }
cache_of() { [[ $1 == *records* ]] && echo 4GiB || echo 32MiB; }
transport_of() { echo "${1##*@}"; }
keys=(fps reader daemon switches lookup getattr read other sreads sbytes mode)
declare -A R=()
for ((r = 1; r <= runs; r++)); do
  for ((i = 0; i < ${#names[@]}; i++)); do
    name=${names[$(((i + r - 1) % ${#names[@]}))]}
    if [[ $name == ext4 ]]; then line=$(run_ext4 "$r")
    elif [[ $name == "ext4 O_DIRECT" ]]; then line=$(run_ext4 "$r" --direct)
    elif [[ $name == "ext4 listed" ]]; then line=$(run_ext4 "$r" listed)
    elif [[ $name == disk* ]]; then line=$(run_ranges "$(level_of "${name#disk }")" "$r")
    elif [[ $name == *listed* ]]; then line=$(run_mount "$(level_of "$name")" 32MiB "$r" "$(transport_of "$name")" "" listed)
    else line=$(run_mount "$(level_of "$name")" "$(cache_of "$name")" "$r" "$(transport_of "$name")"); fi
    read -ra v <<<"$line"
    for k in "${!keys[@]}"; do [[ ${v[$k]} == - ]] || R[$name,${keys[$k]}]+="${v[$k]} "; done
    echo "run $r: $name: $line" >&2
  done
done

printf '\ncost_per_file benchmark: %d ImageNet-sized JPEGs, file layout, %d readers (%s), %s (%s), no limits\n' \
  "$n" "$threads" "$reader" "$(findmnt -no SOURCE -T "$src")" "$(disk_of "$src")"
printf 'page cache dropped and a fresh daemon every run; medians of %d runs (ratios: medians of per-run ratios; listed\n' "$runs"
printf 'contenders against ext4 listed)\n'
printf 'CPU in us per file; the daemon'"'"'s context switches, requests, store reads and store bytes per file\n'
printf '%-19s %8s %7s %8s %8s %9s %7s %8s %6s %6s %12s %12s %8s\n' contender files/s "vs ext4" "readers" daemon switches \
  lookup getattr read other "store reads" "store bytes" mode
# A listed contender is compared with ext4 listed the same way, where that ran.
base_of() { if [[ $1 == *listed* && $1 != ext4* && -n ${R[ext4 listed,fps]:-} ]]; then echo "ext4 listed"; else echo ext4; fi; }
for name in "${names[@]}"; do
  if baseline "$name"; then
    printf '%-19s %8.0f %6.2fx %8.0f %8s\n' "$name" "$(med "$name" fps)" "$(ratio "$name" "$(base_of "$name")")" "$(med "$name" reader)" -
  else
    printf '%-19s %8.0f %6.2fx %8.0f %8.0f %9.2f %7.2f %8.2f %6.2f %6.2f %12.2f %12.0f %8s\n' "$name" "$(med "$name" fps)" \
      "$(ratio "$name" "$(base_of "$name")")" "$(med "$name" reader)" "$(med "$name" daemon)" "$(med "$name" switches)" "$(med "$name" lookup)" \
      "$(med "$name" getattr)" "$(med "$name" read)" "$(med "$name" other)" "$(med "$name" sreads)" \
      "$(med "$name" sbytes)" "$(tr ' ' '\n' <<<"${R[$name,mode]}" | grep . | sort -u | paste -sd/)"
  fi
done

# Issue 68's goals, where their contenders ran.
has() { [[ -n ${R[$1,fps]:-} ]]; }
for t in "${transports[@]}"; do
  printf '\ngoals @%s:' "$t"
  has "L5 pieces @$t" && printf ' L5 >= 1.6x ext4: %s (%.2fx); daemon <= 60 us a file at L5: %s (%.0f us);' \
    "$(met "$(ratio "L5 pieces @$t" ext4) >= 1.6")" "$(ratio "L5 pieces @$t" ext4)" \
    "$(met "$(med "L5 pieces @$t" daemon) <= 60")" "$(med "L5 pieces @$t" daemon)"
  has "full pieces @$t" && has "disk full" && printf ' full >= 0.95x disk full: %s (%.2fx);' \
    "$(met "$(ratio "full pieces @$t" "disk full") >= 0.95")" "$(ratio "full pieces @$t" "disk full")"
  has "L5 listed @$t" && has "ext4 listed" && printf ' L5 listed >= 1.9x ext4 listed: %s (%.2fx);' \
    "$(met "$(ratio "L5 listed @$t" "ext4 listed") >= 1.9")" "$(ratio "L5 listed @$t" "ext4 listed")"
  has "full records @$t" && printf ' records epoch 0 at full >= 0.95x ext4: %s (%.2fx)' \
    "$(met "$(ratio "full records @$t" ext4) >= 0.95")" "$(ratio "full records @$t" ext4)"
done
for name in "${names[@]}"; do
  [[ $name == *@auto ]] && has "$name" && has "${name% @auto} @dev" &&
    printf '\n%s: auto over dev %.2fx files/s (goal >= 0.95x: %s)' "${name% @auto}" "$(ratio "$name" "${name% @auto} @dev")" \
      "$(met "$(ratio "$name" "${name% @auto} @dev") >= 0.95")"
  [[ $name == *@uring ]] && has "$name" && has "${name% @uring} @dev" &&
    printf '\n%s: uring over dev %.2fx files/s, readers'"'"' CPU %.0f against %.0f us a file, daemon CPU %.0f against %.0f' \
      "${name% @uring}" "$(ratio "$name" "${name% @uring} @dev")" "$(med "$name" reader)" "$(med "${name% @uring} @dev" reader)" \
      "$(med "$name" daemon)" "$(med "${name% @uring} @dev" daemon)"
done
printf '\n'

if ((perf)); then
  for name in "${names[@]}"; do
    baseline "$name" && continue
    data=$BENCH_DIR/cost-perf-${name//[ @]/-}.data
    if [[ $name == *listed* ]]; then run_mount "$(level_of "$name")" 32MiB 99 "$(transport_of "$name")" "$data" listed >/dev/null
    else run_mount "$(level_of "$name")" "$(cache_of "$name")" 99 "$(transport_of "$name")" "$data" >/dev/null; fi
    printf '\nperf of the daemon over one epoch, %s (self time, top entries):\n' "$name"
    perf report -i "$data" --stdio --no-children --sort dso,symbol 2>/dev/null |
      awk '/^ +[0-9.]+%/ && n++ < 25 {sub(/ +- +- +$/, ""); print}'
  done
fi

mkdir -p "$BENCH_DIR/results"
printf '{"benchmark": "cost_per_file", "files": %d, "runs": %d, "threads": %d, "contenders": %s}\n' "$n" "$runs" \
  "$threads" "$(runs_json names "${keys[@]}")" >"$BENCH_DIR/results/cost_per_file-$count-$reader.json"
