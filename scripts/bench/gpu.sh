#!/usr/bin/env bash
# GPU path of L3 on a Cityscapes-like set of 1920x1080 PNGs, same run, same images: the CUDA
# decoder's images/s and GB/s of decoded output (kernel only, and end to end: compressed bytes in,
# pixels in pinned host memory), the CPU L3 decoder and libspng, one core each. Prints "no GPU"
# for the GPU rows on a machine without a CUDA device (or a build without CUDA).
#   scripts/bench/gpu.sh [COUNT=60] [SECONDS=3]
source "$(dirname "$0")/common.sh"
count=${1:-60}
seconds=${2:-3}
bench_setup
src=$(make_dataset fhd-png "$count" 3)
"$bin" --version
"$root/build/scripts/bench/gpu_bench" --seconds "$seconds" "$src"
