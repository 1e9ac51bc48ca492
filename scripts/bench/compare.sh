#!/usr/bin/env bash
# This build against an earlier commit on pack, the read, cold-epoch and L3 benchmarks, in one
# run: both builds pack the same source in turns (--jobs 2, the source in the page cache); read.sh
# mounts the same store with both builds in turns (BASELINE_BIN); cold.sh and l3.sh run from the
# baseline's worktree and from this one, alternating, on the same datasets ($BENCH_DIR).
# A restructuring is within noise when every figure of a pair is.
#   BASELINE_REV=REV scripts/bench/compare.sh [COUNT=2000] [RUNS=3]
source "$(dirname "$0")/common.sh"
rev=${BASELINE_REV:?set BASELINE_REV to the commit to compare with}
count=${1:-2000}
runs=${2:-3}
bench_setup
base=$(baseline_tree "$rev")
echo "baseline: $(git -C "$root" rev-parse --short "$rev") ($(git -C "$root" log -1 --format=%s "$rev" | cut -c1-70))"
echo "this:     $(git -C "$root" rev-parse --short HEAD) ($(git -C "$root" log -1 --format=%s HEAD | cut -c1-70))"
# Both builds must read the store: the baseline's packs it (this build reads every older format).
store=$BENCH_DIR/store-imagenet-$count
rm -rf "$store"
"$base/build/cli/fidelityfs" pack "$(make_dataset imagenet "$count" 20)" "$store" --progress off >/dev/null
src=$(make_dataset imagenet "$count" 20)
echo "== pack $count files --jobs 2 (the two builds in turns, same source, in the page cache)"
find "$src" -type f -exec cat {} + >/dev/null
declare -A R
for ((r = 1; r <= runs; r++)); do
  for side in baseline this; do
    packer=$bin
    [[ $side == baseline ]] && packer=$base/build/cli/fidelityfs
    rm -rf "$BENCH_DIR/compare-pack"
    t0=$(now)
    "$packer" pack "$src" "$BENCH_DIR/compare-pack" --jobs 2 --progress off >/dev/null
    R[$side,s]+=" $(x "$(now) - $t0")"
  done
done
rm -rf "$BENCH_DIR/compare-pack"
printf '%-10s %12s %12s   (median of %d runs; runs: %s | %s)\n' "pack" "baseline s" "this s" "$runs" "${R[baseline,s]# }" "${R[this,s]# }"
printf '%-10s %12.2f %12.2f   this/baseline %.3f\n' "" "$(med baseline s)" "$(med this s)" "$(x "$(med this s) / $(med baseline s)")"
echo "== read.sh $count $runs 10 (this build and the baseline's, same store, same runs)"
BASELINE_BIN=$base/build/cli/fidelityfs "$root/scripts/bench/read.sh" "$count" "$runs" 10 2>&1 | tail -12
for script in cold.sh l3.sh; do
  case $script in
    cold.sh) args=("$count" "$runs" 100000000) ;;
    l3.sh) args=(20 "$runs") ;;
  esac
  for side in baseline this; do
    tree=$root
    [[ $side == baseline ]] && tree=$base
    echo "== $script ${args[*]} ($side)"
    BENCH_DIR=$BENCH_DIR "$tree/scripts/bench/$script" "${args[@]}" 2>&1 | tail -14
  done
done
