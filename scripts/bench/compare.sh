#!/usr/bin/env bash
# This build against an earlier commit on the read, cold-epoch and L3 benchmarks, in one run:
# read.sh mounts the same store with both builds in turns (BASELINE_BIN); cold.sh and l3.sh run
# from the baseline's worktree and from this one, alternating, on the same datasets ($BENCH_DIR).
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
