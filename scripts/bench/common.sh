# Shared helpers for the benchmarks (sourced). Builds the project and makes datasets of real
# photos (synthetic ones when ../shared is absent), cached under $BENCH_DIR.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/fidelityfs-bench}
bin=${FIDELITYFS_BIN:-$root/build/cli/fidelityfs}  # FIDELITYFS_BIN: another build's, for an A/B
mkdir -p "$BENCH_DIR"

# bench_setup: installs what the benchmarks need and builds build/ (Release; BUILD_TARGETS: only
# those). BENCH_NO_BUILD=1 skips the build and uses build/ as it is (while it is being built
# elsewhere, or is a build of another type); it must hold the fidelityfs binary.
bench_setup() {
  "$root/scripts/deps.sh" bench
  if [[ ${BENCH_NO_BUILD:-0} == 1 ]]; then
    [[ -x $bin ]] || { echo "BENCH_NO_BUILD=1 but $bin is missing: build it first (scripts/build.sh)" >&2; exit 1; }
    return 0
  fi
  (cd "$root" && BUILD_DIR=build BUILD_TYPE=Release scripts/build.sh >/dev/null)
}

# make_dataset KIND COUNT CLASSES -> prints the folder
make_dataset() {
  local kind=$1 count=$2 classes=$3 out=$BENCH_DIR/$1-$2
  if [[ ! -f $out/.done ]]; then
    rm -rf "$out"
    local shared=$root/../shared/datasets photos=''
    if [[ -x $shared/fetch-photos.sh ]] && photos=$("$shared/fetch-photos.sh" | tail -1) && [[ -d $photos ]]; then :; else photos=''; fi
    if [[ $kind == imagenet-sized ]]; then  # the project's own: ImageNet's bytes per file
      /usr/bin/python3 "$root/scripts/bench/make_imagenet_sized.py" ${photos:+--photos "$photos"} --count "$count" \
        --classes "$classes" --out "$out" >&2
    elif [[ -n $photos ]]; then
      /usr/bin/python3 "$shared/make_imagefolder.py" --photos "$photos" --kind "$kind" --count "$count" \
        --classes "$classes" --out "$out" >&2
    else
      /usr/bin/python3 "$root/tests/fixtures/make_tree.py" --kind "$kind" --count "$count" --classes "$classes" \
        --out "$out" >&2
    fi
    touch "$out/.done"
  fi
  echo "$out"
}

# baseline_tree REV: a Release build of fidelityfs at REV in a worktree under $BENCH_DIR (made
# once); prints the worktree's folder.
baseline_tree() {
  local rev
  rev=$(git -C "$root" rev-parse --verify "$1^{commit}")
  local tree=$BENCH_DIR/baseline-$rev
  if [[ ! -f $tree/.built ]]; then
    rm -rf "$tree"
    git -C "$root" worktree prune
    git -C "$root" worktree add --detach "$tree" "$rev" >/dev/null
    (cd "$tree" && BUILD_DIR=build BUILD_TYPE=Release scripts/build.sh >/dev/null)
    touch "$tree/.built"
  fi
  echo "$tree"
}

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Small helpers of the benchmark scripts.
# field JSON KEY: one value of a JSON object (readbench's output).
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
# kb PID KEY: a /proc/PID/status value in kB (VmRSS, VmHWM, RssAnon).
kb() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
# cpu_ticks PID: user + system clock ticks of a process so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# ctx_switches PID: context switches of the process's live threads so far (voluntary: it slept,
# waiting; involuntary: it was preempted).
ctx_switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n + 0}'; }
# cold: drops the page cache (after writing back what is dirty).
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# read_bytes PID: the bytes a process has made storage deliver so far (/proc/PID/io read_bytes,
# counted when the block layer is asked, O_DIRECT and io_uring workers included).
read_bytes() { awk '/^read_bytes/ {print $2}' "/proc/$1/io"; }
# json_get FILE KEY[.KEY...]: one value of a JSON file (a mount's /.fidelity/stats).
json_get() {
  /usr/bin/python3 -c 'import functools,json,sys; print(functools.reduce(lambda o, k: o[k], sys.argv[2].split("."), json.load(open(sys.argv[1]))))' "$1" "$2"
}
# x EXPR: EXPR evaluated by bc -l.
x() { echo "$1" | bc -l; }
# disk_of PATH: MAJ:MIN of the disk holding PATH (a partition's whole disk), as blkio's throttle
# files take it.
disk_of() {
  local d
  d=$(findmnt -no MAJ:MIN -T "$1" | tr -d ' ')
  if [[ -f /sys/dev/block/$d/partition ]]; then cat "/sys/dev/block/$d/../dev"; else echo "$d"; fi
}
# in_cgroup CGROUP CMD...: runs CMD in a cgroup-v1 group (its folder): the shell joins the group,
# then execs CMD, so that CMD and whatever it forks (a mount's daemon, its io_uring workers) are
# in it from their start.
in_cgroup() { bash -c 'echo $BASHPID >"$1/cgroup.procs" && shift && exec "$@"' _ "$@"; }
# wait_exit PID: waits (30 s at most) for a process to exit, on a pidfd; at once if it has.
wait_exit() { /usr/bin/python3 -c "import os,select,sys; select.select([os.pidfd_open(int(sys.argv[1]))], [], [], 30)" "$1" 2>/dev/null || true; }
# remove_cgroup CG: the cgroup-v1 group CG removed once its processes have exited and been reaped
# (a daemon is reaped by init after the unmount, which nothing announces: rmdir is retried, 30 s at most).
remove_cgroup() {
  local p i
  [[ -d $1 ]] || return 0
  while read -r p; do wait_exit "$p"; done < <(cat "$1/cgroup.procs" 2>/dev/null)
  for ((i = 0; i < 150; i++)); do
    rmdir "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
# daemon_pid MNT STORE [BIN=$bin]: the pid of the daemon serving MNT, a mount of STORE by BIN,
# once `BIN mount STORE MNT [-o OPTIONS]` has returned: the `pid` of its /.fidelity/stats. A
# build older than that key (compare.sh's baseline) is found by its command line (forked, not
# exec'd, the daemon keeps the mount command's; pgrep -x anchors the regex to the whole line).
daemon_pid() {
  json_get "$1/.fidelity/stats" pid 2>/dev/null || pgrep -f -x "${3:-$bin} mount $2 $1( .*)?" | head -1
}

# run_in_netns NAME CMD...: runs CMD in a new network namespace NAME (its loopback up), with
# FIDBENCH_INNER=NAME so that a script re-running itself there knows it is inside; then removes the
# namespace and exits with CMD's status (it does not return).
run_in_netns() {
  local ns=$1 rc=0
  shift
  ip netns add "$ns"
  # Expanded now, not at exit: the trap may run after this function's locals are gone.
  # shellcheck disable=SC2064
  trap "ip netns del $(printf %q "$ns") 2>/dev/null || true" EXIT
  ip netns exec "$ns" ip link set lo up
  FIDBENCH_INNER=$ns ip netns exec "$ns" "$@" || rc=$?
  exit $rc
}

# emulated_link UPSTREAM TBF_MBIT RTT_MS LOG (inside a namespace of run_in_netns): a tc tbf of
# TBF_MBIT on the namespace's loopback, and tests/integration/fault_proxy.py in front of UPSTREAM (a
# URL) adding RTT_MS to every request, its stderr in LOG. Sets proxy_pid and purl (its URL). The
# proxy prints "PORT n" once it listens: that line is read from its stdout (kept open so that it
# never writes into a closed pipe), waiting at most 10 s.
emulated_link() {
  local word port
  tc qdisc add dev lo root tbf rate "${2}mbit" burst 512kb latency 100ms
  exec {proxy_fd}< <(exec /usr/bin/python3 "$root/tests/integration/fault_proxy.py" --upstream "${1#http://}" 2>"$4")
  proxy_pid=$!
  read -r -t 10 word port <&"$proxy_fd" && [[ $word == PORT ]] ||
    { echo "$(basename "$0"): the fault proxy did not start: $(tail -n 5 "$4")" >&2; exit 1; }
  purl=http://127.0.0.1:$port
  curl -sf -X POST "$purl/__fault__?mode=none&latency_ms=$3" >/dev/null
}

# med NAME KEY: the median of the runs' values R[NAME,KEY] (the caller's associative array R, as
# below).
med() { tr ' ' '\n' <<<"${R[$1,$2]}" | grep . | median; }
# ratio A B [KEY=fps]: the median over the runs of R[A,KEY] / R[B,KEY], run by run.
ratio() {
  local -a a_ b_
  local i_
  read -ra a_ <<<"${R[$1,${3:-fps}]:-}"
  read -ra b_ <<<"${R[$2,${3:-fps}]:-}"
  ((${#b_[@]})) || { echo 0; return; }  # B not measured (a subset of contenders)
  for i_ in "${!a_[@]}"; do x "${a_[$i_]} / ${b_[$i_]}"; done | median
}
# met EXPR: a goal's verdict, "met" if EXPR (for bc -l) holds, else "NOT met".
met() { if (($(x "$1"))); then echo met; else echo "NOT met"; fi; }

# The runs kept in the caller's associative array R (R[name,key] = "v1 v2 ...", one value a run) as
# JSON: {"name": {"key": [v1, v2, ...], ...}, ...} for the names in the array named $1 and the keys
# after it; a key without values is left out, a value that is not a number is a JSON string.
runs_json() {  # NAMES_ARRAY KEY...
  local -n names_=$1
  shift
  local sep='' s2 name k
  printf '{'
  for name in "${names_[@]}"; do
    printf '%s"%s": {' "$sep" "$name"
    s2=''
    for k in "$@"; do
      [[ -n ${R[$name,$k]:-} ]] || continue
      printf '%s"%s": [%s]' "$s2" "$k" "$(for v_ in ${R[$name,$k]}; do
        if [[ $v_ =~ ^(-?)([0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$ && -n ${BASH_REMATCH[2]}${BASH_REMATCH[3]} ]]; then
          echo "${BASH_REMATCH[1]}${BASH_REMATCH[2]:-0}${BASH_REMATCH[3]}${BASH_REMATCH[4]}"  # bc's .5 is 0.5
        else echo "\"$v_\""; fi
      done | paste -sd,)"
      s2=', '
    done
    printf '}'
    sep=', '
  done
  printf '}'
}
