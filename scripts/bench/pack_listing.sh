#!/usr/bin/env bash
# What a pack holds in memory for its listing, per listed file, for each kind of source:
#   folder   pack FOLDER STORE
#   tar      pack TREE.tar STORE
#   http     pack http://127.0.0.1:PORT/ STORE   (nginx's JSON autoindex, scripts/http-server.sh)
# Every pack is `--shard 0/1000 --jobs 1`: it lists every file and reads one in a thousand, so
# its peak RSS is its listing plus a constant. Two trees shaped as ImageNet's (1,281 files a
# class folder, names "n00000007/n00000007_000123.JPEG", files of 1 byte): SMALL files and
# COUNT files; per file = (peak RSS with COUNT - peak RSS with SMALL) / (COUNT - SMALL). The tars
# are made by GNU tar, members in the folder's directory order. Medians of RUNS runs.
#   scripts/bench/pack_listing.sh [COUNT=1000000] [RUNS=3]
source "$(dirname "$0")/common.sh"
count=${1:-1000000}
runs=${2:-3}
small=1000
work=$BENCH_DIR/pack-listing

BUILD_TARGETS="fidelityfs" bench_setup
command -v nginx >/dev/null || { echo "pack_listing.sh: needs nginx (scripts/deps.sh test)" >&2; exit 2; }

make_names_tree() {  # OUT N: N files of 1 byte, 1,281 a folder
  [[ -f $1/.done && -f $1.tar ]] && return
  rm -rf "$1"
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import os, sys
out, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    c = f"n{i // 1281:08d}"
    if i % 1281 == 0:
        os.makedirs(os.path.join(out, c))
    with open(os.path.join(out, c, f"{c}_{i % 1281:06d}.JPEG"), "wb") as f:
        f.write(b"x")
EOF
  tar -cf "$1.tar" -C "$1" .
  touch "$1/.done"
}

http_dir=$work/http
cleanup() { "$root/scripts/http-server.sh" stop "$http_dir" >/dev/null 2>&1 || true; }
trap cleanup EXIT
mkdir -p "$work"
make_names_tree "$work/tree-$small" "$small"
make_names_tree "$work/tree-$count" "$count"
eval "$("$root/scripts/http-server.sh" start "$http_dir" --root "$work" --json-index)"

peak_kb() {  # SOURCE: the peak RSS of a sharded pack of it, in kB
  local out=$work/store
  rm -rf "$out"
  /usr/bin/time -f '%M' -o "$work/time" "$bin" pack "$1" "$out" --shard 0/1000 --jobs 1 >/dev/null 2>"$work/pack.err" ||
    { echo "pack_listing.sh: pack $1 failed: $(tail -n 3 "$work/pack.err")" >&2; exit 1; }
  tail -n 1 "$work/time"
}

declare -A R
names=(folder tar http)
for ((run = 0; run < runs; run++)); do
  for n in "$small" "$count"; do
    # .done is listed too: one file more in both trees, the same for every source.
    R[folder,$n]+=" $(peak_kb "$work/tree-$n")"
    R[tar,$n]+=" $(peak_kb "$work/tree-$n.tar")"
    R[http,$n]+=" $(peak_kb "$FIDELITYFS_HTTP_URL/tree-$n/")"
  done
done

printf '%d files against %d, pack --shard 0/1000, peak RSS (median of %d runs)\n' "$count" "$small" "$runs"
printf '%-8s %12s %12s %14s\n' source "small MiB" "large MiB" "B per file"
for name in "${names[@]}"; do
  a=$(echo ${R[$name,$small]} | tr ' ' '\n' | median)
  b=$(echo ${R[$name,$count]} | tr ' ' '\n' | median)
  printf '%-8s %12.1f %12.1f %14.0f\n' "$name" "$(echo "$a / 1024" | bc -l)" "$(echo "$b / 1024" | bc -l)" \
    "$(echo "($b - $a) * 1024 / ($count - $small)" | bc -l)"
done
