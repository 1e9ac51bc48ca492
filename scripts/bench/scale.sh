#!/usr/bin/env bash
# An ImageNet-sized count of small files: COUNT 48x48 JPEGs (about 1 KB each) in 1,000 class
# folders, made by make_small.py (crops of the shared photos, or synthetic), cached under
# $BENCH_DIR. Prints:
#   * pack: files/s and peak RSS of `fidelityfs pack --jobs 2` from a cold page cache;
#   * the store: index bytes per file;
#   * for each readdir mode (-o readdir=plus|plain|auto), every run from dropped caches and a
#     fresh daemon: the time `fidelityfs mount` takes to return (it returns once the mount
#     answers), the first listing of the tree the way torchvision's ImageFolder lists it
#     (imagefolder_list.py), the second listing, then a first epoch: READS files drawn at random
#     from the listing, each opened and read whole by readbench with 2 threads; the source tree
#     on ext4 the same way in the same run as the baseline;
#   * the daemon's RSS and anonymous memory (RssAnon) per file after the mount, after the first
#     listing and after the reads, and the kernel's FUSE inodes (fuse_inode slab objects);
#   * then the time to read one published order file, /.fidelity/order/epoch-0, whole (the
#     daemon makes it on the first read), and the daemon's memory after it;
#   * before the runs, the first mount of the store, which makes its tables file (the mount's
#     tables, mapped; $BENCH_DIR/cache/fidelityfs/tables): its time, from dropped caches, and
#     the file's size. The runs' mounts map that file.
# The modes and ext4 take turns within a run (a different one first each run), so that the noise
# of a shared machine hits them alike; figures are medians of RUNS runs, ratios medians of the
# per-run ratios. Every step is bounded in time (LIMIT_S for the whole script). Needs root
# (drop_caches, mounts).
# EMPTY=1 makes empty files instead (stored as blobs, one piece each): a namespace of COUNT names
# with the least data, on a loop-mounted ext4 with an inode per file, for the largest counts.
# OPTS adds mount options to every run's mount (OPTS=cache=4GiB: a cache that holds the store, so
# that random_reads=auto loads whole records; the mode in force is printed).
#   scripts/bench/scale.sh [COUNT=1281167]      env: RUNS=3 READS=100000 LIMIT_S=14400 EMPTY=0 OPTS= LAYOUT=scan|file
source "$(dirname "$0")/common.sh"
count=${1:-1281167}
runs=${RUNS:-3}
reads=${READS:-100000}
classes=1000
deadline=$((SECONDS + ${LIMIT_S:-14400}))
[[ $EUID == 0 ]] || { echo "scale.sh: needs root (drop_caches, mounts)" >&2; exit 2; }
((count >= classes)) || { echo "scale.sh: COUNT must be at least $classes" >&2; exit 2; }

# bounded SECS CMD...: runs CMD for at most SECS seconds and what is left of LIMIT_S.
bounded() {
  local limit=$1 left=$((deadline - SECONDS))
  shift
  ((left > 0)) || { echo "scale.sh: out of time (LIMIT_S) before: $*" >&2; return 124; }
  timeout --kill-after=30 "$((limit < left ? limit : left))" "$@"
}
fuse_inodes() { awk '$1 == "fuse_inode" {print $2}' /proc/slabinfo; }

bench_setup
export XDG_CACHE_HOME=$BENCH_DIR/cache  # the mounts' tables files
tables_dir=$XDG_CACHE_HOME/fidelityfs/tables
rb=$root/build/scripts/bench/readbench
lister=$root/scripts/bench/imagefolder_list.py
empty=${EMPTY:-0}
if ((empty)); then
  src=$BENCH_DIR/empty-$count  # a loop-mounted ext4 image, $src.img
  store=$BENCH_DIR/scale-store-empty-$count
  what="empty files"
else
  src=$BENCH_DIR/small48-$count
  store=$BENCH_DIR/scale-store-$count
  what="JPEGs of 48x48"
fi
# LAYOUT=file: the store packed with --layout file (its own store folder).
layout=${LAYOUT:-scan}
[[ $layout == scan ]] || store=$store-$layout
m=$BENCH_DIR/scale-mnt
mkdir -p "$m" "$BENCH_DIR/results"
daemon=''
cleanup() {
  fusermount3 -u "$m" 2>/dev/null || true
  if [[ -n $daemon ]]; then wait_exit "$daemon"; fi
  if ((empty)) && mountpoint -q "$src"; then umount "$src"; fi
}
trap cleanup EXIT
fusermount3 -u "$m" 2>/dev/null || true

# ---- the tree ------------------------------------------------------------------------------
# The marker sits beside the tree, not in it: the store and the listings hold only the JPEGs.
if ((empty)); then
  if [[ ! -f $src.done ]]; then
    mountpoint -q "$src" && umount "$src"
    rm -rf "$src" "$src.img"
    mkdir -p "$src"
    # 1 KiB blocks and 128-byte inodes: about 200 bytes of image a name.
    truncate -s $((count * 400 + (1 << 30))) "$src.img"
    mkfs.ext4 -q -F -b 1024 -I 128 -N $((count + count / 50 + 10000)) "$src.img"
    mount -o loop,noatime "$src.img" "$src"
    rmdir "$src/lost+found"  # an empty class would stop ImageFolder
    t0=$(now)
    bounded 7200 /usr/bin/python3 -c '
import os, sys
out, count, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for c in range(classes):
    d = os.path.join(out, f"n{c:08d}")
    os.mkdir(d)
    for j in range(count // classes + (c < count % classes)):
        os.close(os.open(f"{d}/n{c:08d}_{j}.JPEG", os.O_CREAT | os.O_WRONLY, 0o644))' "$src" "$count" "$classes"
    printf 'made %d empty files in %.0f s\n' "$count" "$(echo "$(now) - $t0" | bc -l)"
    touch "$src.done"
  fi
  mountpoint -q "$src" || mount -o loop,noatime "$src.img" "$src"
elif [[ ! -f $src.done ]]; then
  rm -rf "$src"
  shared=$root/../shared/datasets photos=''
  if [[ -x $shared/fetch-photos.sh ]] && photos=$("$shared/fetch-photos.sh" | tail -1) && [[ -d $photos ]]; then :; else photos=''; fi
  t0=$(now)
  bounded 7200 nice -n 10 /usr/bin/python3 "$root/scripts/bench/make_small.py" ${photos:+--photos "$photos"} \
    --count "$count" --classes "$classes" --out "$src" --jobs 2
  printf 'generated %d files in %.0f s (%s)\n' "$count" "$(echo "$(now) - $t0" | bc -l)" \
    "$([[ -n $photos ]] && echo "crops of the photos in $photos" || echo synthetic)"
  touch "$src.done"
fi

# ---- pack (cold page cache), once per COUNT: its figures are kept next to the store ---------
packed=$store.pack
if [[ ! -f $store/index.sqlite || ! -f $packed ]]; then
  rm -rf "$store"
  cold
  t0=$(now)
  bounded 7200 /usr/bin/time -v -o "$BENCH_DIR/scale-pack.time" nice -n 10 "$bin" pack "$src" "$store" --layout "$layout" --jobs 2 --progress off >/dev/null
  secs=$(echo "$(now) - $t0" | bc -l)
  peak=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$BENCH_DIR/scale-pack.time")
  echo "$secs $peak" >"$packed"
fi
read -r pack_s pack_kb <"$packed"
files=$("$bin" inspect "$store" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["files"])')
((files == count)) || { echo "scale.sh: the store has $files files, expected $count" >&2; exit 1; }
index_b=$(stat -c %s "$store/index.sqlite")
store_b=$(du -sb "$store" | cut -f1)
src_b=$(find "$src" -name '*.JPEG' -printf '%s\n' | awk '{s += $1} END {print s}')

# ---- runs ------------------------------------------------------------------------------------
list=$BENCH_DIR/scale.list
declare -A R  # R[name,metric] = "v1 v2 ..." (one value a run)
add() { R[$1,$2]+="$(printf '%.6g' "$3") "; }

# listing ROOT NAME: first and second listing; the first writes the list the reads draw from.
listing() {
  local out
  out=$(bounded 1800 /usr/bin/python3 "$lister" "$1" --out "$list.$2")
  (($(field "$out" files) == count)) || { echo "scale.sh: $2 listed $(field "$out" files) files, expected $count" >&2; exit 1; }
  add "$2" list1 "$(field "$out" seconds)"
  out=$(bounded 1800 /usr/bin/python3 "$lister" "$1")
  add "$2" list2 "$(field "$out" seconds)"
}
# epoch ROOT NAME SEED: READS files drawn at random from NAME's listing, read whole, 2 threads.
epoch() {
  /usr/bin/python3 -c 'import random,sys; f=open(sys.argv[1]).read().split("\n")[:-1]; r=random.Random(int(sys.argv[4]))
print("".join(sys.argv[3] + "/" + p + "\n" for p in r.sample(f, min(int(sys.argv[2]), len(f)))), end="")' \
    "$list.$2" "$reads" "$1" "$3" >"$list.$2.reads"
  local out
  out=$(bounded 3600 "$rb" "$list.$2.reads" --threads 2 --in-order)
  add "$2" reads "$(field "$out" seconds)"
}
mem() {  # mem NAME POINT: the daemon's RSS and RssAnon in bytes per file
  add "$1" "rss_$2" "$(echo "$(kb "$daemon" VmRSS) * 1024 / $files" | bc -l)"
  add "$1" "anon_$2" "$(echo "$(kb "$daemon" RssAnon) * 1024 / $files" | bc -l)"
}

run_ext4() {
  cold
  listing "$src" ext4
  epoch "$src" ext4 "$1"
}
run_mount() {  # run_mount MODE SEED
  local mode=$1 t0 k0
  cold
  k0=$(fuse_inodes)
  t0=$(now)
  bounded 600 "$bin" mount "$store" "$m" -o "readdir=$mode${OPTS:+,$OPTS}"
  add "$mode" mount "$(echo "$(now) - $t0" | bc -l)"
  daemon=$(daemon_pid "$m" "$store")
  mem "$mode" mount
  listing "$m" "$mode"
  mem "$mode" list
  add "$mode" inodes_list "$(($(fuse_inodes) - k0))"
  epoch "$m" "$mode" "$2"
  random_mode=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["random_reads"]["why"])' \
    "$m/.fidelity/stats")
  mem "$mode" reads
  add "$mode" inodes_reads "$(($(fuse_inodes) - k0))"
  add "$mode" lookups "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["lookups"])' "$m/.fidelity/stats")"
  t0=$(now)
  local lines
  lines=$(bounded 600 wc -l <"$m/.fidelity/order/epoch-0")
  add "$mode" order "$(echo "$(now) - $t0" | bc -l)"
  mem "$mode" order
  ((lines == count)) || { echo "scale.sh: epoch-0 has $lines lines, expected $count" >&2; exit 1; }
  grep -q "\"readdir\": \"$mode\"" "$m/.fidelity/config" || { echo "scale.sh: the mount does not say readdir=$mode" >&2; exit 1; }
  fusermount3 -u "$m"
  wait_exit "$daemon"
  daemon=''
}

# ---- the first mount: it makes the tables file ---------------------------------------------
rm -rf "$tables_dir"
cold
t0=$(now)
bounded 600 "$bin" mount "$store" "$m"
first_mount_s=$(echo "$(now) - $t0" | bc -l)
daemon=$(daemon_pid "$m" "$store")
first_anon_b=$(echo "$(kb "$daemon" RssAnon) * 1024 / $files" | bc -l)
fusermount3 -u "$m"
wait_exit "$daemon"
daemon=''
tables_b=$(cat "$tables_dir"/*.tables | wc -c)

names=(ext4 plus plain auto)
for ((r = 1; r <= runs; r++)); do
  for ((i = 0; i < ${#names[@]}; i++)); do
    name=${names[$(((i + r - 1) % ${#names[@]}))]}
    if [[ $name == ext4 ]]; then run_ext4 "$r"; else run_mount "$name" "$r"; fi
  done
  echo "run $r of $runs done" >&2
done

# ---- report ----------------------------------------------------------------------------------
# Ratios are to ext4, run by run (common.sh's ratio NAME ext4 METRIC); total: the sum of three.
for name in "${names[@]}"; do
  read -ra l1 <<<"${R[$name,list1]}"
  read -ra l2 <<<"${R[$name,list2]}"
  read -ra rd <<<"${R[$name,reads]}"
  for i in "${!l1[@]}"; do add "$name" total "$(echo "${l1[$i]} + ${l2[$i]} + ${rd[$i]}" | bc -l)"; done
done

printf '\nscale benchmark: %d %s (%.0f B on average) in %d class folders; %d reads a first epoch, 2 threads\n' \
  "$files" "$what" "$(echo "$src_b / $files" | bc -l)" "$classes" "$reads"
printf '%s layout; pack --jobs 2 from a cold page cache: %.0f s, %.0f files/s, peak RSS %d MiB\n' "$layout" "$pack_s" \
  "$(echo "$files / $pack_s" | bc -l)" "$((pack_kb / 1024))"
printf 'store: %.1f MB (source %.1f MB); index.sqlite %d B, %.1f B per file\n' "$(echo "$store_b / 1000000" | bc -l)" \
  "$(echo "$src_b / 1000000" | bc -l)" "$index_b" "$(echo "$index_b / $files" | bc -l)"
printf 'first mount (makes the tables file, %.1f B per file): %.2f s from dropped caches, RssAnon %.1f B per file after it\n' \
  "$(echo "$tables_b / $files" | bc -l)" "$first_mount_s" "$first_anon_b"
printf 'mount options: readdir=MODE%s; random reads: %s\n' "${OPTS:+,$OPTS}" "$random_mode"
printf 'page cache dropped and a fresh daemon before every run (its mount maps the tables file); median of %d runs, ratios: median of per-run ratios to ext4\n\n' "$runs"
printf '%-6s %8s | %18s | %18s | %18s | %18s\n' mode "mount s" "first listing s" "second listing s" "first $reads reads s" "total s"
printf '%-6s %8s | %8.2f %9s | %8.3f %9s | %8.2f %9s | %8.2f %9s\n' ext4 - "$(med ext4 list1)" "" "$(med ext4 list2)" "" \
  "$(med ext4 reads)" "" "$(med ext4 total)" ""
for name in plus plain auto; do
  printf '%-6s %8.2f | %8.2f %8.2fx | %8.3f %8.2fx | %8.2f %8.2fx | %8.2f %8.2fx\n' "$name" "$(med "$name" mount)" \
    "$(med "$name" list1)" "$(ratio "$name" ext4 list1)" "$(med "$name" list2)" "$(ratio "$name" ext4 list2)" \
    "$(med "$name" reads)" "$(ratio "$name" ext4 reads)" "$(med "$name" total)" "$(ratio "$name" ext4 total)"
done
printf '\ndaemon memory, bytes per file (RSS / RssAnon); kernel FUSE inodes (fuse_inode slab objects added, %d B each)\n' \
  "$(awk '$1 == "fuse_inode" {print $4}' /proc/slabinfo)"
printf 'after the listing and after the reads; LOOKUPs the daemon answered by the end\n'
printf '%-6s %18s %18s %18s %18s %14s %14s %10s\n' mode "after mount" "after listing" "after reads" "after order file" \
  "inodes listing" "inodes reads" LOOKUPs
for name in plus plain auto; do
  printf '%-6s %8.1f / %7.1f %8.1f / %7.1f %8.1f / %7.1f %8.1f / %7.1f %14.0f %14.0f %10.0f\n' "$name" \
    "$(med "$name" rss_mount)" "$(med "$name" anon_mount)" "$(med "$name" rss_list)" "$(med "$name" anon_list)" \
    "$(med "$name" rss_reads)" "$(med "$name" anon_reads)" "$(med "$name" rss_order)" "$(med "$name" anon_order)" \
    "$(med "$name" inodes_list)" "$(med "$name" inodes_reads)" "$(med "$name" lookups)"
done
printf 'reading /.fidelity/order/epoch-0 whole (made on that read), after the reads: %s\n' \
  "$(for n in plus plain auto; do printf '%s %.2f s; ' "$n" "$(med "$n" order)"; done)"
printf 'per run (s): %s\n' "$(for n in "${names[@]}"; do printf '%s list1 [%s] reads [%s]; ' "$n" "${R[$n,list1]% }" "${R[$n,reads]% }"; done)"

{
  printf '{"files": %d, "reads": %d, "runs": %d, "pack_s": %s, "pack_peak_kb": %s, "index_bytes": %s, ' \
    "$files" "$reads" "$runs" "$pack_s" "$pack_kb" "$index_b"
  printf '"tables_bytes": %s, "first_mount_s": %s, "first_mount_anon_b": %s, "modes": ' "$tables_b" "$first_mount_s" \
    "$first_anon_b"
  runs_json names mount list1 list2 reads total rss_mount anon_mount rss_list anon_list rss_reads anon_reads \
    inodes_list inodes_reads lookups order rss_order anon_order
  printf '}\n'
} >"$BENCH_DIR/results/scale-$( ((empty)) && echo empty-)$count.json"
