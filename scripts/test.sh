#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: installs what it needs, builds (normal,
# ASan/UBSan, libFuzzer), runs the unit tests, the fuzz targets for a bounded time and the
# real-mount integration tests. Exits non-zero on any failure.
#   FUZZ_SECONDS=N  seconds per fuzz target (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
step() { printf '\n=== %s\n' "$*"; }

step "dependencies"
scripts/deps.sh test

step "build (RelWithDebInfo)"
BUILD_DIR=build scripts/build.sh
step "unit tests"
(cd build && ctest --output-on-failure -j "$jobs")

step "build (ASan/UBSan) and unit tests under sanitizers"
BUILD_DIR=build-asan BUILD_TYPE=Debug scripts/build.sh -DFIDELITYFS_SANITIZE=ON
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j "$jobs")

step "fuzz targets (${FUZZ_SECONDS:-20}s each)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFIDELITYFS_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzzers
seeds=build-fuzz/seeds
if [[ ! -d $seeds/tree ]]; then
  /usr/bin/python3 tests/fixtures/make_tree.py --kind edge --out "$seeds/tree"
fi
if [[ ! -d $seeds/index ]]; then
  rm -rf "$seeds/store" && build/cli/fidelityfs pack "$seeds/tree" "$seeds/store" --progress off >/dev/null
  mkdir -p "$seeds/index" && cp "$seeds/store/index.sqlite" "$seeds/index/"
fi
shopt -s nullglob
fuzz_summary=()
for fuzzer in build-fuzz/tests/fuzz_*; do
  [[ -f $fuzzer && -x $fuzzer ]] || continue
  name=$(basename "$fuzzer")
  corpus=build-fuzz/corpus/$name
  mkdir -p "$corpus"
  seed_dirs=()
  [[ -d tests/fuzz/seeds/$name ]] && seed_dirs+=("tests/fuzz/seeds/$name")
  case $name in
    fuzz_jpeg) seed_dirs+=("$seeds/tree/jpeg") ;;
    fuzz_index) seed_dirs+=("$seeds/index") ;;
    fuzz_image_io) seed_dirs+=("$seeds/tree/png" "$seeds/tree/other") ;;
  esac
  log=build-fuzz/$name.log
  rc=0
  "$fuzzer" -max_total_time="${FUZZ_SECONDS:-20}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "$corpus" "${seed_dirs[@]}" >"$log" 2>&1 || rc=$?
  grep -E 'stat::number_of_executed_units|^==[0-9]+==ERROR|^SUMMARY' "$log" | sed "s/^/$name: /" || true
  if ((rc != 0)); then tail -50 "$log"; echo "$name failed (exit $rc)"; exit 1; fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  fuzz_summary+=("$(printf '%-16s %12s executions  %9s/s' "$name" "${execs:-?}" "${rate:-?}")")
done
step "fuzz executions per target (${FUZZ_SECONDS:-20}s each)"
((${#fuzz_summary[@]})) && printf '%s\n' "${fuzz_summary[@]}" || echo "no fuzz targets were built"

step "integration tests (real mounts)"
export FIDELITYFS_BIN=$root/build/cli/fidelityfs
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration
