#!/usr/bin/env bash
# Configures and builds fidelityfs into build/ (or $BUILD_DIR). Extra arguments go to cmake.
#   BUILD_TYPE (default RelWithDebInfo); BUILD_TARGETS: space-separated targets (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
