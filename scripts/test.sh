#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: installs what it needs, builds (normal,
# ASan/UBSan with libFuzzer, ThreadSanitizer), runs the unit tests, the fuzz targets for a bounded time and the
# real-mount integration tests. Exits non-zero on any failure.
#   FUZZ_SECONDS=N  seconds per fuzz target (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
step() { printf '\n=== %s  [%d s into the run]\n' "$*" "$SECONDS"; }  # the times show where CI's minutes go

step "dependencies"
scripts/deps.sh test

step "the code's shape (layers' includes, file and function lengths)"
/usr/bin/python3 scripts/check_structure.py

# Every build here takes -g1 (line tables and function names: backtraces and sanitizer reports keep
# their file:line) rather than -g: about a quarter less compile time on 2 cores.
step "build (RelWithDebInfo)"
# Tests ON explicitly: demo.sh configures build/ without them.
BUILD_DIR=build scripts/build.sh -DFIDELITYFS_TESTS=ON \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"

# Test data of the unit tests (tests/unit/test_files.h): the edge zoo and three 1920x1080 PNGs,
# from real photos when the shared datasets are there, synthetic otherwise.
step "unit test data"
test_data=$root/build/test-data
if [[ ! -f $test_data/.done ]]; then
  rm -rf "$test_data"
  /usr/bin/python3 tests/fixtures/make_tree.py --kind edge --out "$test_data/edge"
  shared=$root/../shared/datasets
  if [[ -x $shared/fetch-photos.sh ]] && photos=$("$shared/fetch-photos.sh" | tail -1) && [[ -d $photos ]]; then
    /usr/bin/python3 "$shared/make_imagefolder.py" --photos "$photos" --kind fhd-png --count 3 \
      --classes 1 --jobs "$jobs" --out "$test_data/fhd"
  else
    /usr/bin/python3 tests/fixtures/make_tree.py --kind fhd-png --count 3 --out "$test_data/fhd"
  fi
  touch "$test_data/.done"
fi
export FIDELITYFS_TEST_DATA=$test_data

# The unit tests need no FUSE: they run where /dev/fuse is hidden (an empty file bound over it in
# a private mount namespace), so that nothing of the read path can depend on a mount.
without_fuse() {
  if [[ -e /dev/fuse ]] && command -v unshare >/dev/null && unshare -m true 2>/dev/null; then
    unshare -m bash -c 'mount --bind "$1" /dev/fuse && shift && exec "$@"' _ "$root/build/no-fuse" "$@"
  else
    "$@"
  fi
}
# The unit tests as one gtest shard per core, a process each (ctest starts a process per test: a
# sanitizer build's start-up, about 0.2 s, 500 times over). A shard's whole output is shown when it
# fails; a hung one is stopped after 20 minutes.
unit_tests() {  # BUILD_DIR [GTEST_FILTER]
  local dir=$1 filter=${2:-*} pids=() failed=0 i
  for ((i = 0; i < jobs; i++)); do
    (cd "$root/$dir/tests" && without_fuse env GTEST_TOTAL_SHARDS="$jobs" GTEST_SHARD_INDEX="$i" timeout 1200 \
      ./fid_unit_tests --gtest_filter="$filter" --gtest_brief=1 >"$root/$dir/unit-shard-$i.log" 2>&1) &
    pids+=($!)
  done
  for ((i = 0; i < jobs; i++)); do
    if wait "${pids[i]}"; then
      grep -E '^\[  (PASSED|SKIPPED) ' "$dir/unit-shard-$i.log" | sed "s/^/shard $i: /" || true
    else
      cat "$dir/unit-shard-$i.log"
      failed=1
    fi
  done
  return "$failed"
}
: >"$root/build/no-fuse"
step "unit tests (without /dev/fuse)"
unit_tests build

step "build (ASan/UBSan and libFuzzer, clang) and unit tests under sanitizers"
# One clang build serves both: the unit tests under ASan/UBSan and the fuzz targets (which add
# libFuzzer's coverage to the same sanitizers). -O1: a Debug build (assertions on) that runs the
# pixel loops of the L3 tests several times faster than -O0, with every sanitizer check kept.
CC=clang CXX=clang++ BUILD_DIR=build-asan BUILD_TYPE=Debug BUILD_TARGETS="fid_unit_tests fuzzers" scripts/build.sh \
  -DFIDELITYFS_SANITIZE=ON -DFIDELITYFS_FUZZ=ON -DFIDELITYFS_TESTS=ON -DCMAKE_C_FLAGS_DEBUG="-g1 -O1" \
  -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1"
# The property test of the store writers (tests/unit/test_pack_property.cpp) runs 500 random cases
# in the build above and 100 here, where each costs several times as much.
FIDELITYFS_PROPERTY_CASES=100 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 unit_tests build-asan

step "build (ThreadSanitizer) and unit tests under it"
# The daemon too: the integration tests run their stress test once against it
# (tests/integration/test_stress.py, FIDELITYFS_TSAN_BIN). The codec tests are left out here:
# codec/ runs no threads, and they are the slowest under TSan; so is the writers' property test,
# whose threads are the packer's, which the pack tests run under TSan.
BUILD_DIR=build-tsan BUILD_TYPE=Debug BUILD_TARGETS="fid_unit_tests fidelityfs" scripts/build.sh -DFIDELITYFS_TSAN=ON \
  -DFIDELITYFS_TESTS=ON -DCMAKE_C_FLAGS_DEBUG="-g1 -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" unit_tests build-tsan \
  '-L3Codec.*:L3Block.*:L3View.*:Jpeg*:ImageIo.*:EdgeZoo.*:Transcode*:CodecQuality*:Cases/PackProperty.*'

step "fuzz targets (${FUZZ_SECONDS:-15}s each)"
seeds=build-asan/seeds
if [[ ! -d $seeds/tree ]]; then
  /usr/bin/python3 tests/fixtures/make_tree.py --kind edge --out "$seeds/tree"
fi
if [[ ! -d $seeds/l3 ]]; then
  # fuzz_l3 seeds: bare L3 bitstreams of small zoo images (from the CLI's payloads, docs/FORMAT.md
  # "L3 payload"), after mode byte 0 (as is) and 2 (sizes kept consistent under mutation).
  mkdir -p "$seeds/l3"
  for f in "$seeds"/tree/png/{size_*,label_map,palette,gray_alpha}.png; do
    build/cli/fidelityfs l3 encode "$f" "$seeds/l3/$(basename "$f" .png).payload" >/dev/null
  done
  /usr/bin/python3 - "$seeds/l3" <<'EOF'
import pathlib, sys
for p in pathlib.Path(sys.argv[1]).glob("*.payload"):
    d = p.read_bytes()
    n, m = int.from_bytes(d[6:8], "little"), int.from_bytes(d[8:10], "little")
    l3 = d[12 + 3 * n + m:]
    p.with_suffix(".raw").write_bytes(b"\0" + l3)
    p.with_suffix(".fixed").write_bytes(b"\2" + l3)
    p.unlink()
EOF
fi
if [[ ! -d $seeds/index ]]; then
  rm -rf "$seeds/store" && build/cli/fidelityfs pack "$seeds/tree" "$seeds/store" --progress off >/dev/null
  # A videos table (docs/FORMAT.md "videos") on the first folder, as --video-frames writes one,
  # so that fuzz_index and fuzz_tables reach its rows without a video decoded here.
  /usr/bin/python3 - "$seeds/store/index.sqlite" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE videos(dir INTEGER PRIMARY KEY, name BLOB NOT NULL, source_size INTEGER NOT NULL, "
           "codec TEXT NOT NULL, fps_num INTEGER NOT NULL, fps_den INTEGER NOT NULL, width INTEGER NOT NULL, "
           "height INTEGER NOT NULL, frames INTEGER NOT NULL)")
db.execute("INSERT INTO videos SELECT id, CAST(name || '.mp4' AS BLOB), 123456, 'h264', 30000, 1001, 640, 480, "
           "(SELECT count(*) FROM files WHERE files.dir = dirs.id) FROM dirs WHERE id = 1")
db.commit()
EOF
  mkdir -p "$seeds/index" && cp "$seeds/store/index.sqlite" "$seeds/index/"
fi
# fuzz_index runs "SQL:" inputs on a copy of this index; fuzz_control mounts this store in-process;
# fuzz_tables edits the tables file made from it.
export FIDELITYFS_FUZZ_INDEX_BASE=$root/$seeds/index/index.sqlite FIDELITYFS_FUZZ_STORE=$root/$seeds/store
shopt -s nullglob
# One fuzzer per core at a time, each for FUZZ_SECONDS; results are checked in name order.
run_fuzzer() {  # NAME: runs build-asan/tests/NAME, exit status in build-asan/NAME.rc
  local name=$1 corpus=build-asan/corpus/$1 seed_dirs=() rc=0
  mkdir -p "$corpus"
  [[ -d tests/fuzz/seeds/$name ]] && seed_dirs+=("tests/fuzz/seeds/$name")
  case $name in
    fuzz_jpeg) seed_dirs+=("$seeds/tree/jpeg") ;;
    fuzz_index) seed_dirs+=("$seeds/index") ;;
    fuzz_l3) seed_dirs+=("$seeds/l3") ;;
    fuzz_image_io) seed_dirs+=("$seeds/tree/png" "$seeds/tree/other") ;;
  esac
  "build-asan/tests/$name" -max_total_time="${FUZZ_SECONDS:-15}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$corpus" "${seed_dirs[@]}" >"build-asan/$name.log" 2>&1 || rc=$?
  echo "$rc" >"build-asan/$name.rc"
}
fuzzers=()
for fuzzer in build-asan/tests/fuzz_*; do
  [[ -f $fuzzer && -x $fuzzer ]] && fuzzers+=("$(basename "$fuzzer")")
done
running=0
for name in "${fuzzers[@]}"; do
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
  run_fuzzer "$name" &
  running=$((running + 1))
done
wait
fuzz_summary=()
for name in "${fuzzers[@]}"; do
  log=build-asan/$name.log
  rc=$(cat "build-asan/$name.rc")
  grep -E 'stat::number_of_executed_units|^==[0-9]+==ERROR|^SUMMARY' "$log" | sed "s/^/$name: /" || true
  if ((rc != 0)); then tail -50 "$log"; echo "$name failed (exit $rc)"; exit 1; fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  fuzz_summary+=("$(printf '%-16s %12s executions  %9s/s' "$name" "${execs:-?}" "${rate:-?}")")
done
step "fuzz executions per target (${FUZZ_SECONDS:-15}s each)"
((${#fuzz_summary[@]})) && printf '%s\n' "${fuzz_summary[@]}" || echo "no fuzz targets were built"

# The integration tests run with the kernel's requests over /dev/fuse, then the mount-facing ones
# again over FUSE over io_uring (transport=auto follows the fuse module's enable_uring, which this
# script sets for each pass where the kernel has it and puts back as it was after; every mount
# checks that it got the transport of its pass).
uring_param=/sys/module/fuse/parameters/enable_uring
if [[ -w $uring_param ]]; then
  uring_was=$(cat "$uring_param")
  restore_uring() { if [[ $uring_was == Y ]]; then echo 1; else echo 0; fi >"$uring_param"; }
  trap restore_uring EXIT
  echo 0 >"$uring_param"
fi
step "integration tests (real mounts)"
export FIDELITYFS_BIN=$root/build/cli/fidelityfs FIDELITYFS_TSAN_BIN=$root/build-tsan/cli/fidelityfs
FIDELITYFS_TEST_TRANSPORT=dev /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=25 tests/integration

if [[ -w $uring_param ]]; then
  step "integration tests over FUSE over io_uring (mount-facing)"
  echo 1 >"$uring_param"
  (cd tests/integration && FIDELITYFS_TEST_TRANSPORT=uring /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=10 \
    test_mount.py test_clips.py test_stress.py test_random_reads.py test_sequential.py test_l3.py test_order.py \
    test_shared_mount.py test_metrics.py test_security.py test_tour.py)
  restore_uring
  trap - EXIT
else
  step "integration tests over FUSE over io_uring: skipped ($uring_param is not there or not writable)"
fi
step "done"
