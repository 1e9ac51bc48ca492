#!/usr/bin/env bash
# The fault soak (not in CI): COUNT ImageNet-sized JPEGs packed (file layout), uploaded to a Ceph
# RGW on loopback and mounted as s3:// through the fault proxy for MINUTES minutes, READERS
# threads reading in random order with level changes while faults come every few seconds (resets,
# 503 storms, trickles, corrupted transfers, truncations, stalls, a 30 s outage); then the faults
# stop. Prints reads, wrong bytes, failures during and after the faults, the daemon's RSS (start,
# peak, end) and how long SIGTERM takes to end the daemon during a trickle (scripts/bench/soak.py).
# Exit 0 when 0 wrong, 0 failed after the faults and SIGTERM < 2 s. Needs root (drop_caches).
#   scripts/bench/soak.sh [MINUTES=10] [COUNT=1000]
#   env: READERS=8 BENCH_NO_BUILD=1 (build/ as it is)
source "$(dirname "$0")/common.sh"
minutes=${1:-10}
count=${2:-1000}
[[ $EUID == 0 ]] || { echo "soak.sh: needs root (drop_caches, mounts)" >&2; exit 2; }
BUILD_TARGETS=fidelityfs bench_setup
src=$(make_dataset imagenet-sized "$count" 20)
store=$BENCH_DIR/soak-store-$count
[[ -f $store/index.sqlite ]] || "$bin" pack "$src" "$store" --progress off --jobs 2 >/dev/null
work=$BENCH_DIR/soak-work
rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 "$root/scripts/bench/soak.py" --bin "$bin" --store "$store" --work "$work" --minutes "$minutes" \
  --readers "${READERS:-8}"
