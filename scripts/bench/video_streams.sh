#!/usr/bin/env bash
# Video clips decoded for training: the CPU a clip costs, readers and daemon together, when a
# loader reads clips of decoded RGB frames. On a Kinetics-like set made with the ffmpeg CLI
# (scripts/bench/make_videos_set.py, the set video_frames.sh uses): COUNT videos of 10 s at 340x256,
# 30 fps, H.264 yuv420p (x264 veryfast, crf 23, x264's keyframe every 250 frames), in 4 class
# folders. Contenders, each on the same clips in the same order:
#   pyav            the .mp4 files with PyAV as SlowFast's pyav_decode: open, seek to the keyframe at
#                   or before the clip's start, decode to its end, the clip's frames to_ndarray rgb24;
#   burst           the ffmpeg CLI's JPEGs on ext4 (`ffmpeg -i V -q:v 2 OUT/CLASS/VIDEO/img_%05d.jpg`),
#                   each frame np.asarray(Image.open(p).convert("RGB")) (Pillow);
#   frames          a `fidelityfs pack --video-frames` store (quality-95 JPEGs, levels) mounted
#                   (default options), read as burst;
#   streams         a `fidelityfs pack --video-streams` store (the default GOP) mounted with
#                   `-o raw_format=ppm`, each frame np.asarray(Image.open(p)) of its PPM;
#   streams-source  the same with `--video-streams=gop=source` (the videos' own GOPs).
# Clips (scripts/bench/video_clip_reader.py; a fixed seed, CLIPS of each kind a video, no frame of a
# video in two clips of a kind): `consecutive`, 32 consecutive frames at a random start; `tsn`, 8
# frames, one from each of 8 equal segments of the video. Each clip's frames are stacked into one
# uint8 array. PROCS reader processes (forked), each its share of the clips.
# CPU a clip: user + system time of the reader processes (getrusage RUSAGE_CHILDREN, imports not
# counted) plus, for a mount, the daemon's utime + stime delta over the read (/proc/PID/stat), over
# the clips. Also clips/s (wall). State: the compressed bytes warm, the decoded frames not: before
# each measurement the .mp4s (pyav), the JPEGs (burst) or the store's records (mounts) are read
# with cat, and each mount is a fresh one (its daemon reads its records with O_DIRECT, so that those
# bytes come from the disk whatever the page cache holds: a read costs the daemon a syscall, no copy).
# RUNS runs, every contender in turn in each, medians (ratios: the median of the runs' ratios).
# Printed with the issue's goals and whether each is met: the stores' bytes (du -sb) against the
# videos' (gop=source <= 1.02x, default <= 2.5x and <= 0.1x the --video-frames store), and CPU a clip
# of streams against pyav (<= 0.6x consecutive, <= 0.5x tsn) and burst (<= 1.0x consecutive). After
# each mount's last read: its /.fidelity/stats keys that start with `video` (GOPs and frames decoded),
# per clip, where the build has them. Frames (CHECK videos, 4 by default; scripts/bench/video_frames_check.py): each stream
# store's folders hold ffprobe's frame counts, every frame's luma against the ffmpeg CLI's rgb24
# decode (worst frame and mean, goals 45 dB for gop=source and 38 for the default), and a fresh
# mount read last frame first gives the bytes of a forward read. The --video-streams contenders are skipped, with a note, when
# `fidelityfs pack --help` names no --video-streams or that pack fails.
# COLD=1 (root): also clips/s of the mounts with a cold page cache on clips.sh's disk model (the
# daemon's reads limited by a cgroup-v1 blkio group to IOPS reads/s and BPS bytes/s on the store's
# disk, 150 and 150 MiB/s by default); the pyav and burst contenders are not measured cold.
#   scripts/bench/video_streams.sh [COUNT=20] [RUNS=3]   (or env COUNT, RUNS)
#   env: JOBS=$(nproc) (pack and burst) PROCS=2 (readers) CLIPS=4 (clips of each kind a video)
#        CHECK=4 SEED=0 COLD=0 IOPS=150 BPS=157286400 BENCH_NO_BUILD=1 (use build/ as it is)
source "$(dirname "$0")/common.sh"
count=${1:-${COUNT:-20}}
runs=${2:-${RUNS:-3}}
jobs=${JOBS:-$(nproc)}
procs=${PROCS:-2}
clips=${CLIPS:-4}
iops=${IOPS:-150}
bps=${BPS:-157286400}
[[ ${COLD:-0} == 0 || $EUID == 0 ]] || { echo "video_streams.sh: COLD=1 needs root (drop_caches, cgroups)" >&2; exit 2; }
BUILD_TARGETS=fidelityfs bench_setup
reader=$root/scripts/bench/video_clip_reader.py
checker=$root/scripts/bench/video_frames_check.py
check=${CHECK:-4}  # videos whose every frame is compared with the ffmpeg CLI's (frames_table)
out=$BENCH_DIR/video-streams-out
m=$BENCH_DIR/video-streams-mnt
cg=/sys/fs/cgroup/blkio/fidelityfs-video-streams
tck=$(getconf CLK_TCK)
kinds=(consecutive tsn)
notes=()
dev=''
daemon=''

# make_set COUNT: the set (made once, in video_frames.sh's folder for it, made as it makes it):
# prints its folder of class folders of videos.
make_set() {
  local dir=$BENCH_DIR/video-frames-${1}x10s
  if [[ ! -f $dir/.done ]]; then
    rm -rf "$dir"
    /usr/bin/python3 "$root/scripts/bench/make_videos_set.py" --count "$1" --seconds 10 --classes $(($1 < 4 ? $1 : 4)) \
      --jobs "$jobs" --out "$dir/videos" >&2
    touch "$dir/.done"
  fi
  echo "$dir/videos"
}

# pyav_ready: whether PyAV imports; as root, installs Debian's python3-av first when it does not.
pyav_ready() {
  /usr/bin/python3 -c 'import av' 2>/dev/null && return 0
  if [[ $EUID == 0 ]]; then
    echo "installing python3-av (PyAV)..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends python3-av >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-av >/dev/null; } || true
  fi
  /usr/bin/python3 -c 'import av' 2>/dev/null && return 0
  notes+=("pyav not measured: PyAV is missing (apt-get install -y python3-av)")
  return 1
}

# burst SET DEST: each video's frames written by the ffmpeg CLI as video_frames.sh writes them,
# DEST/CLASS/VIDEO/img_%05d.jpg (-q:v 2), $jobs ffmpeg processes at a time.
# shellcheck disable=SC2016  # (expanded by the bash -c, per video)
burst() {
  find "$1" -type f -name '*.mp4' -print0 | sort -z |
    SET=$1 DEST=$2 xargs -0 -n 1 -P "$jobs" bash -c 'rel=${1#"$SET"/}; d=$DEST/${rel%.*}
      mkdir -p "$d" && exec ffmpeg -nostdin -loglevel error -i "$1" -q:v 2 "$d/img_%05d.jpg"' _
}

# pack_store NAME ARGS...: the set packed into $out/NAME with ARGS (its output in $out/NAME.log);
# on failure a note with the log's last line, and status 1.
pack_store() {
  local name=$1
  shift
  "$bin" pack "$set" "$out/$name" --jobs "$jobs" --progress off "$@" >"$out/$name.log" 2>&1 && return 0
  notes+=("$name not measured: \`fidelityfs pack $*\` failed: $(grep . "$out/$name.log" | tail -n 1)")
  return 1
}

# setup: the plan of clips, the burst and the stores, in $out; sets contenders (those ready).
setup() {
  rm -rf "$out" && mkdir -p "$out" "$m"
  /usr/bin/python3 "$reader" plan "$set" "$out/plan.json" --clips "$clips" --seed "${SEED:-0}"
  contenders=()
  if pyav_ready; then contenders+=(pyav); fi
  burst "$set" "$out/burst"
  contenders+=(burst)
  if pack_store frames --video-frames; then contenders+=(frames); fi
  if "$bin" pack --help 2>&1 | grep -q -- --video-streams; then
    if pack_store streams --video-streams; then contenders+=(streams); fi
    if pack_store streams-source --video-streams=gop=source; then contenders+=(streams-source); fi
  else
    notes+=("streams, streams-source not measured: this fidelityfs ($bin) has no \`pack --video-streams\`")
  fi
}

is_mount() { [[ $1 == frames || $1 == streams* ]]; }
# warm DIR FIND_ARGS...: the files under DIR (those FIND_ARGS select) read into the page cache.
warm() {
  local dir=$1
  shift
  find "$dir" -type f "$@" -exec cat {} + >/dev/null
}

# mount_store NAME [CGROUP]: $out/NAME mounted at $m (in CGROUP, a blkio group, if given), a
# --video-streams store with raw_format=ppm; sets daemon (its pid).
mount_store() {
  local -a cmd=("$bin" mount "$out/$1" "$m")
  [[ $1 != streams* ]] || cmd+=(-o raw_format=ppm)
  if [[ -n ${2:-} ]]; then in_cgroup "$2" "${cmd[@]}"; else "${cmd[@]}"; fi 2>"$out/mount.log" ||
    { echo "video_streams.sh: mount of $1 failed: $(tail -n 3 "$out/mount.log")" >&2; return 1; }
  daemon=$(daemon_pid "$m" "$out/$1")
}
unmount_store() {
  fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true
  [[ -z $daemon ]] || wait_exit "$daemon"
  daemon=''
}

# read_clips ROOT MODE KIND: the reader over ROOT (its JSON line).
read_clips() { /usr/bin/python3 "$reader" "$2" "$1" "$out/plan.json" --kind "$3" --procs "$procs"; }

# measure CONTENDER KIND: one warm measurement; prints the reader's JSON and the daemon's CPU
# seconds over the read (0 for no mount). A mount's stats afterwards: $out/CONTENDER.KIND.stats.json.
measure() {
  local c=$1 kind=$2 j d0=0 d1=0
  case $c in
    pyav) warm "$set" -name '*.mp4' && j=$(read_clips "$set" pyav "$kind") || return 1 ;;
    burst) warm "$out/burst" -name '*.jpg' && j=$(read_clips "$out/burst" folders "$kind") || return 1 ;;
    *)
      mount_store "$c" || return 1
      warm "$out/$c/records"
      d0=$(cpu_ticks "$daemon")
      j=$(read_clips "$m" folders "$kind") || { unmount_store; return 1; }
      d1=$(cpu_ticks "$daemon")
      cat "$m/.fidelity/stats" >"$out/$c.$kind.stats.json"  # one open (the stats may change between a stat and an open)
      unmount_store ;;
  esac
  echo "$j $(x "($d1 - $d0) / $tck")"
}

# keep NAME JSON DAEMON_S: one measurement's figures into R (a clip's: ms of CPU, readers + daemon,
# readers, daemon; clips/s; frames), its clips into CLIPS and its array shape into SHAPE.
keep() {
  local n cpu
  n=$(field "$2" clips)
  cpu=$(printf '%.6f' "$(field "$2" cpu_s)")
  R[$1,cpu]+=" $(x "1000 * ($cpu + $3) / $n")"
  R[$1,reader]+=" $(x "1000 * $cpu / $n")"
  R[$1,daemon]+=" $(x "1000 * $3 / $n")"
  R[$1,cps]+=" $(printf '%.6f' "$(field "$2" clips_per_s)")"
  R[$1,fpc]+=" $(x "$(field "$2" frames) / $n")"
  CLIPS[$1]=$n
  SHAPE[$1]=$(field "$2" shape | tr -d ' ')
}

# one_run: every contender on each kind of clip, in turn; a contender that fails is dropped, with
# a note.
one_run() {
  local kind c res
  for kind in "${kinds[@]}"; do
    for c in "${contenders[@]}"; do
      if res=$(measure "$c" "$kind"); then
        keep "$c:$kind" "${res% *}" "${res##* }"
      else
        notes+=("$c dropped: its $kind read failed in run $r (its error above)")
        mapfile -t contenders < <(printf '%s\n' "${contenders[@]}" | grep -vx -- "$c")
      fi
    done
  done
}

# rat A B [KEY=cpu]: "0.42x", the median ratio of A to B, or "-" if either was not measured.
rat() {
  if [[ -n ${R[$1,${3:-cpu}]:-} && -n ${R[$2,${3:-cpu}]:-} ]]; then printf '%.2fx' "$(ratio "$1" "$2" "${3:-cpu}")"
  else echo -; fi
}
# goal A B OP LIMIT WHAT: a goal's line on the ratio of A's CPU to B's: "WHAT: 0.42x (goal OP LIMIT): met".
goal() {
  if [[ -z ${R[$1,cpu]:-} || -z ${R[$2,cpu]:-} ]]; then printf -- '- %s: not measured (goal %s %s)\n' "$5" "$3" "$4"; return; fi
  local v
  v=$(ratio "$1" "$2" cpu)
  printf -- '- %s: %.2fx (goal %s %s): %s\n' "$5" "$v" "$3" "$4" "$(met "$v $3 $4")"
}

label() {
  case $1 in
    pyav) echo "PyAV (SlowFast's pyav_decode) over the .mp4s" ;;
    burst) echo "Pillow over ffmpeg -q:v 2 JPEGs on ext4" ;;
    frames) echo "Pillow over the --video-frames mount (JPEG q95)" ;;
    streams) echo "--video-streams mount, PPM (default GOP)" ;;
    streams-source) echo "--video-streams=gop=source mount, PPM" ;;
  esac
}

# cpu_table KIND: the contenders' medians on KIND's clips.
cpu_table() {
  local kind=$1 c any=''
  for c in pyav burst frames streams streams-source; do [[ -n $any || -z ${R[$c:$kind,fpc]:-} ]] || any=$c; done
  [[ -n $any ]] || { printf '\n## %s clips: no contender measured\n' "$kind"; return; }
  printf '\n## %s clips (%s frames a clip, %s clips of %s videos), %s reader processes, warm compressed bytes, median of %s\n\n' \
    "$kind" "$(printf %.0f "$(med "$any:$kind" fpc)")" "${CLIPS[$any:$kind]}" "$count" "$procs" "$runs"
  printf '| contender | CPU ms a clip (readers + daemon) | readers | daemon | vs PyAV | vs JPEG burst | clips/s (wall) | clip array |\n'
  printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n'
  for c in pyav burst frames streams streams-source; do
    [[ -n ${R[$c:$kind,cpu]:-} ]] || continue
    printf '| %s | %.1f | %.1f | %.1f | %s | %s | %.1f | %s |\n' "$(label "$c")" "$(med "$c:$kind" cpu)" \
      "$(med "$c:$kind" reader)" "$(med "$c:$kind" daemon)" "$(rat "$c:$kind" "pyav:$kind")" "$(rat "$c:$kind" "burst:$kind")" \
      "$(med "$c:$kind" cps)" "${SHAPE[$c:$kind]}"
  done
  printf '\ngoals (%s):\n' "$kind"
  if [[ $kind == consecutive ]]; then
    goal "streams:$kind" "pyav:$kind" '<=' 0.6 "--video-streams / PyAV, CPU a clip"
    goal "streams:$kind" "burst:$kind" '<=' 1.0 "--video-streams / JPEG burst, CPU a clip"
  else
    goal "streams:$kind" "pyav:$kind" '<=' 0.5 "--video-streams / PyAV, CPU a clip"
  fi
}

# video_stats: each mount's stats keys that start with `video` after its last read, per clip.
video_stats() {
  local c kind f
  printf '\n## %s\n\n' "the mounts' video counters (/.fidelity/stats keys starting with \`video\`, last run, per clip)"
  for c in frames streams streams-source; do
    for kind in "${kinds[@]}"; do
      f=$out/$c.$kind.stats.json
      [[ -f $f ]] || continue
      printf -- '- %s, %s: %s\n' "$c" "$kind" "$(/usr/bin/python3 - "$f" "${CLIPS[$c:$kind]}" <<'PY'
import json, sys
def flat(o, pre=""):
    for k, v in o.items():
        if isinstance(v, dict):
            yield from flat(v, pre + k + ".")
        else:
            yield pre + k, v
n = int(sys.argv[2])
got = [f"{k} {v / n:.2f}" for k, v in flat(json.load(open(sys.argv[1])))
       if k.startswith("video") and isinstance(v, (int, float)) and not isinstance(v, bool)]
print(", ".join(got) if got else "no video.* keys in this build's stats")
PY
)"
    done
  done
}

# bytes_table: the videos', the burst's and the stores' bytes (du -sb of each folder), with goals.
bytes_table() {
  local name b
  declare -gA B=()
  B[videos]=$(find "$set" -type f -name '*.mp4' -printf '%s\n' | awk '{n += $1} END {print n + 0}')
  B[burst]=$(du -sb "$out/burst" | cut -f1)
  for name in frames streams streams-source; do
    [[ ! -f $out/$name/index.sqlite ]] || B[$name]=$(du -sb "$out/$name" | cut -f1)
  done
  printf '\n## bytes (%s videos)\n\n| data | MB | vs videos | vs --video-frames store |\n| --- | ---: | ---: | ---: |\n' "$count"
  for name in videos burst frames streams streams-source; do
    b=${B[$name]:-}
    [[ -n $b ]] || continue
    printf '| %s | %.2f | %.3fx | %s |\n' "$(bytes_label "$name")" "$(x "$b / 1000000")" "$(x "$b / ${B[videos]}")" \
      "$([[ -n ${B[frames]:-} ]] && printf '%.3fx' "$(x "$b / ${B[frames]}")" || echo -)"
  done
  printf '\ngoals (bytes):\n'
  bytes_goal streams-source videos 1.02 "--video-streams=gop=source / the videos"
  bytes_goal streams videos 2.5 "--video-streams (default GOP) / the videos"
  bytes_goal streams frames 0.1 "--video-streams (default GOP) / the --video-frames store"
}
bytes_label() {
  case $1 in
    videos) echo "videos (H.264 .mp4)" ;;
    burst) echo "ffmpeg -q:v 2 burst's JPEGs (du -sb)" ;;
    frames) echo "--video-frames store (du -sb)" ;;
    streams) echo "--video-streams store, default GOP (du -sb)" ;;
    streams-source) echo "--video-streams=gop=source store (du -sb)" ;;
  esac
}
# bytes_goal A B LIMIT WHAT: "WHAT: 0.98x (goal <= LIMIT): met".
bytes_goal() {
  if [[ -z ${B[$1]:-} || -z ${B[$2]:-} ]]; then printf -- '- %s: not measured (goal <= %s)\n' "$4" "$3"; return; fi
  local v
  v=$(x "${B[$1]} / ${B[$2]}")
  printf -- '- %s: %.3fx (goal <= %s): %s\n' "$4" "$v" "$3" "$(met "$v <= $3")"
}

# frames_table: each --video-streams store's frames against the ffmpeg CLI's decode of CHECK videos
# (scripts/bench/video_frames_check.py): frame counts, luma PSNR (worst frame, mean), and a fresh
# mount read last frame first giving the bytes of a forward read.
frames_table() {
  local c j r floor
  printf '\n## frames (%s videos): the ffmpeg CLI decode of the sources against each store\n\n' "$check"
  printf '| store | frame counts = ffprobe | worst frame luma dB | mean dB | goal | reverse read = forward |\n'
  printf '| --- | --- | ---: | ---: | --- | --- |\n'
  for c in streams streams-source; do
    [[ " ${contenders[*]} " == *" $c "* ]] || continue
    mount_store "$c" || continue
    j=$(/usr/bin/python3 "$checker" "$set" "$m" --videos "$check") || { unmount_store; continue; }
    unmount_store
    mount_store "$c" || continue
    r=$(/usr/bin/python3 "$checker" "$set" "$m" --videos "$check" --reverse) || { unmount_store; continue; }
    unmount_store
    floor=$([[ $c == streams-source ]] && echo 45 || echo 38)
    printf '| %s | %s | %s | %s | worst >= %s: %s | %s |\n' "$(label "$c")" "$(field "$j" frame_counts_ok)" \
      "$(field "$j" worst_db)" "$(field "$j" mean_db)" "$floor" \
      "$(met "$(field "$j" worst_db) >= $floor")" \
      "$([[ $(field "$j" digest) == $(field "$r" digest) ]] && echo yes || echo NO)"
  done
}

# The cold part (COLD=1): clips.sh's disk model for the mounts' daemons.
limits() { echo "$dev $1" >"$cg/blkio.throttle.read_iops_device" && echo "$dev $2" >"$cg/blkio.throttle.read_bps_device"; }
cleanup() {
  unmount_store
  [[ -d $cg ]] || return 0
  [[ -z $dev ]] || limits 0 0 2>/dev/null || true
  remove_cgroup "$cg"
}

# cold_runs: RUNS runs of the mounts, each kind of clip, a fresh mount in the blkio group and the
# page cache dropped before each read; clips/s into R[cold:CONTENDER:KIND,cps].
cold_runs() {
  local r kind c j
  mkdir -p "$cg"
  dev=$(disk_of "$out")
  limits "$iops" "$bps"
  for ((r = 1; r <= runs; r++)); do
    for kind in "${kinds[@]}"; do
      for c in "${contenders[@]}"; do
        is_mount "$c" || continue
        mount_store "$c" "$cg" || continue
        cold
        if j=$(read_clips "$m" folders "$kind"); then R[cold:$c:$kind,cps]+=" $(printf '%.6f' "$(field "$j" clips_per_s)")"; fi
        unmount_store
      done
    done
  done
  limits 0 0
}
cold_table() {
  local c
  printf '\n## cold: the mounts with the page cache dropped, the daemon'"'"'s reads limited to %s reads/s and %s MiB/s (blkio), %s reader processes, median of %s\n\n' \
    "$iops" "$((bps >> 20))" "$procs" "$runs"
  printf '| contender | consecutive clips/s | vs --video-frames | tsn clips/s | vs --video-frames |\n| --- | ---: | ---: | ---: | ---: |\n'
  for c in frames streams streams-source; do
    [[ -n ${R[cold:$c:consecutive,cps]:-}${R[cold:$c:tsn,cps]:-} ]] || continue
    printf '| %s | %s | %s | %s | %s |\n' "$(label "$c")" "$(cold_med "$c:consecutive")" \
      "$(rat "cold:$c:consecutive" cold:frames:consecutive cps)" "$(cold_med "$c:tsn")" "$(rat "cold:$c:tsn" cold:frames:tsn cps)"
  done
}
cold_med() { if [[ -n ${R[cold:$1,cps]:-} ]]; then printf '%.1f' "$(med "cold:$1" cps)"; else echo -; fi; }

trap cleanup EXIT
trap 'exit 130' INT TERM
set=$(make_set "$count")
declare -A R=() CLIPS=() SHAPE=()
setup
echo "contenders: ${contenders[*]}" >&2
for ((r = 1; r <= runs; r++)); do one_run; done
for kind in "${kinds[@]}"; do cpu_table "$kind"; done
bytes_table
frames_table
video_stats
if [[ ${COLD:-0} == 1 ]]; then cold_runs; cold_table; fi
if ((${#notes[@]})); then printf '\nnotes:\n'; printf -- '- %s\n' "${notes[@]}"; fi

names=()
for k in "${kinds[@]}"; do for c in pyav burst frames streams streams-source; do
  [[ -z ${R[$c:$k,cpu]:-} ]] || names+=("$c:$k")
  [[ -z ${R[cold:$c:$k,cps]:-} ]] || names+=("cold:$c:$k")
done; done
mkdir -p "$BENCH_DIR/results"
{
  printf '{"videos": %s, "procs": %s, "clips_per_video": %s, ' "$count" "$procs" "$clips"
  printf '"runs": %s, ' "$(runs_json names cpu reader daemon cps fpc)"
  printf '"bytes": {%s}}\n' "$(for k in "${!B[@]}"; do printf '"%s": %s\n' "$k" "${B[$k]}"; done | sort | paste -sd, | sed 's/,/, /g')"
} >"$BENCH_DIR/results/video_streams.json"
printf '\nvideo_streams: CPU ms a clip (readers + daemon), consecutive / tsn:'
for c in pyav burst frames streams streams-source; do
  [[ -n ${R[$c:consecutive,cpu]:-} ]] || continue
  printf ' %s %.1f / %s' "$c" "$(med "$c:consecutive" cpu)" \
    "$([[ -n ${R[$c:tsn,cpu]:-} ]] && printf '%.1f' "$(med "$c:tsn" cpu)" || echo -)"
done
printf '; results in %s\n' "$BENCH_DIR/results/video_streams.json"
