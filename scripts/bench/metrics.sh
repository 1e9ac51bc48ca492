#!/usr/bin/env bash
# The cost of the mount's metrics on the read path: builds fidelityfs as it was before metrics
# (the parent of the commit that added core/metrics.cpp, or BASELINE_REV) in a worktree under
# $BENCH_DIR, then runs read.sh with it as BASELINE_BIN: this build and that one mount the same
# store at level 5 and take turns in the same runs. Prints read.sh's table and the ratio line.
#   scripts/bench/metrics.sh [COUNT=5000] [RUNS=5] [PASSES=20] [KIND=imagenet]
source "$(dirname "$0")/common.sh"
rev=${BASELINE_REV:-$(git -C "$root" log --diff-filter=A --format=%H -- core/metrics.cpp | tail -1)^}
src=$(baseline_tree "$rev")
echo "baseline: $rev ($(git -C "$root" log -1 --format=%s "$rev" | cut -c1-80))"
BASELINE_BIN=$src/build/cli/fidelityfs exec "$root/scripts/bench/read.sh" "$@"
