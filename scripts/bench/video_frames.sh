#!/usr/bin/env bash
# Videos into frames: `fidelityfs pack --video-frames` (decoded in process into clip folders of
# quality-95 JPEGs, then packed) against what is done without it: the ffmpeg CLI writing each
# video's frames as JPEGs (`ffmpeg -i V -q:v 2 OUT/CLASS/VIDEO/img_%05d.jpg`, J videos at a time),
# alone and followed by a plain `fidelityfs pack` of its folders (burst+pack: the burst's seconds
# and that pack's, run right after it, its JPEGs still in the page cache). Same parallelism J on all
# sides (pack --jobs J; J ffmpeg processes), the page cache dropped before each contender, RUNS
# runs, medians (ratios: the median of the runs' ratios). On a Kinetics-like set made with the
# ffmpeg CLI (scripts/bench/make_videos_set.py): COUNT videos of 10 s at 340x256, 30 fps, H.264
# yuv420p (x264 veryfast, crf 23), in 4 class folders, each a slow pan and zoom over a real photo
# (testsrc2 without ../shared's photos). Also: which libjpeg quality gives pack's frames the
# fidelity of ffmpeg's -q:v 2 (mean luma PSNR against the decoded frames, converted to RGB as pack
# converts them, on 10 frames of each of 4 videos), and pack at that quality as one more contender;
# the bytes of the videos, of the store's frames at full and at level 5, and of the burst's JPEGs;
# the peak RSS of pack on one hour-long video (a pan looped, x264 ultrafast; made once), every frame
# decoded and one a second kept (fps=1).
# Needs root (drop_caches) unless COLD=0 (a warm cache instead).
#   scripts/bench/video_frames.sh [COUNT=24] [RUNS=3]
#   env: JOBS=$(nproc) QV=2 (the burst's -q:v) MATCH=1 (0: no matched-quality contender)
#        HOUR=1 (0: no hour-long video) HOUR_SECONDS=3600 (its length; shorter to try the script)
#        COLD=1 BENCH_NO_BUILD=1 (use build/ as it is)
source "$(dirname "$0")/common.sh"
count=${1:-24}
runs=${2:-3}
jobs=${JOBS:-$(nproc)}
qv=${QV:-2}
hour_seconds=${HOUR_SECONDS:-3600}
[[ $EUID == 0 || ${COLD:-1} == 0 ]] || { echo "video_frames.sh: needs root (drop_caches), or COLD=0" >&2; exit 2; }
BUILD_TARGETS=fidelityfs bench_setup
make_videos=$root/scripts/bench/make_videos_set.py
out=$BENCH_DIR/video-frames-out
drop() { if [[ ${COLD:-1} == 1 ]]; then cold; fi; }
mb() { x "$1 / 1000000"; }

# make_set COUNT: the set (made once): prints its folder of class folders of videos.
make_set() {
  local dir=$BENCH_DIR/video-frames-${1}x10s
  if [[ ! -f $dir/.done ]]; then
    rm -rf "$dir"
    /usr/bin/python3 "$make_videos" --count "$1" --seconds 10 --classes $(($1 < 4 ? $1 : 4)) --jobs "$jobs" \
      --out "$dir/videos" >&2
    touch "$dir/.done"
  fi
  echo "$dir/videos"
}

# hour_video VIDEO: a folder holding one video of $hour_seconds s, VIDEO looped (made once).
hour_video() {
  local dir=$BENCH_DIR/video-frames-hour-${hour_seconds}s
  if [[ ! -f $dir/.done ]]; then
    rm -rf "$dir"
    echo "making a ${hour_seconds} s video (x264 ultrafast; once)..." >&2
    /usr/bin/python3 "$make_videos" --loop "$1" --seconds "$hour_seconds" --out "$dir/video/long.mp4" >&2
    touch "$dir/.done"
  fi
  echo "$dir/video"
}

# burst SET DEST: each video's frames written by the ffmpeg CLI, DEST/CLASS/VIDEO/img_%05d.jpg,
# $jobs ffmpeg processes at a time.
# shellcheck disable=SC2016  # (expanded by the bash -c, per video)
burst() {
  local qmin=''
  ((qv >= 2)) || qmin='-qmin 1'  # mjpeg's default qmin is 2
  find "$1" -type f -name '*.mp4' -print0 | sort -z |
    SET=$1 DEST=$2 QARGS="$qmin -q:v $qv" xargs -0 -n 1 -P "$jobs" bash -c 'rel=${1#"$SET"/}; d=$DEST/${rel%.*}
      mkdir -p "$d" && exec ffmpeg -nostdin -loglevel error -i "$1" $QARGS "$d/img_%05d.jpg"' _
}

# frames_of LOG: the frames of a `pack --video-frames` output ("videos: ... into N frames").
frames_of() { sed -n 's/^videos: .* into \([0-9]*\) frames .*/\1/p' "$1"; }
# level_bytes STORE: "full level-5 source" JPEG bytes of a store (inspect --json's bytes_by_level).
level_bytes() {
  "$bin" inspect "$1" --json |
    /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); b=j["bytes_by_level"]; print(b[-1], b[4], j["source_bytes"])'
}
# file_bytes DIR [NAME]: the bytes of the files under DIR (named NAME).
file_bytes() { find "$1" -type f -name "${2:-*}" -printf '%s\n' | awk '{n += $1} END {print n + 0}'; }

# keep NAME SECONDS FRAMES: one run's figures into R.
keep() {
  R[$1,s]+=" $2"
  R[$1,frames]+=" $3"
  R[$1,fps]+=" $(x "$3 / $2")"
}

# one_run: every contender once, in $out (left there for the bytes).
one_run() {
  local t0 t1 t2 n
  rm -rf "$out" && mkdir -p "$out"
  drop
  t0=$(now)
  "$bin" pack "$set" "$out/store" --video-frames --jobs "$jobs" --progress off >"$out/pack.log"
  t1=$(now)
  keep pack "$(x "$t1 - $t0")" "$(frames_of "$out/pack.log")"
  if [[ -n $matched ]]; then
    drop
    t0=$(now)
    "$bin" pack "$set" "$out/store-matched" --video-frames "quality=$matched" --jobs "$jobs" --progress off >"$out/matched.log"
    t1=$(now)
    keep matched "$(x "$t1 - $t0")" "$(frames_of "$out/matched.log")"
  fi
  drop
  t0=$(now)
  burst "$set" "$out/burst"
  t1=$(now)
  "$bin" pack "$out/burst" "$out/store-burst" --jobs "$jobs" --progress off >"$out/burst-pack.log"
  t2=$(now)
  n=$(find "$out/burst" -type f -name '*.jpg' | wc -l)
  keep burst "$(x "$t1 - $t0")" "$n"
  keep burst+pack "$(x "$t2 - $t0")" "$n"
}

# quality_probe VIDEO...: which libjpeg quality matches -q:v $qv on the videos' frames
# (make_videos_set.py --match): prints it and sets matched.
quality_probe() {
  local j
  j=$(/usr/bin/python3 "$make_videos" --match "$@" --qv "$qv")
  matched=$(field "$j" matched_quality)
  printf '\nquality, on %s frames of %s videos: ffmpeg -q:v %s: luma PSNR %.1f dB against the decoded frames,' \
    "$(field "$j" frames)" "$#" "$qv" "$(field "$j" burst_psnr_y)"
  printf ' %.1f KB/frame, tables as libjpeg quality %s;\n' "$(x "$(field "$j" burst_bytes) / 1000")" \
    "$(field "$j" table_quality)"
  printf '  libjpeg (as pack) quality 95: %.1f dB, %.1f KB/frame;' "$(field "$j" q95_psnr_y)" \
    "$(x "$(field "$j" q95_bytes) / 1000")"
  printf ' nearest in PSNR: quality %s, %.1f dB, %.1f KB/frame\n' "$matched" "$(field "$j" matched_psnr_y)" \
    "$(x "$(field "$j" matched_bytes) / 1000")"
}

# speed_table: the contenders' medians.
speed_table() {
  local c label
  printf '\n## %s videos x 10 s (%s frames), %s jobs, %s, median of %s\n\n' "$count" "$(med pack frames)" "$jobs" \
    "$([[ ${COLD:-1} == 1 ]] && echo "cold page cache" || echo "warm page cache")" "$runs"
  printf '| contender | seconds | frames/s | vs burst | vs burst+pack |\n| --- | ---: | ---: | ---: | ---: |\n'
  for c in "${contenders[@]}"; do
    case $c in
      pack) label="fidelityfs pack --video-frames (quality 95)" ;;
      matched) label="fidelityfs pack --video-frames quality=$matched (PSNR of -q:v $qv)" ;;
      burst) label="ffmpeg -q:v $qv burst, $jobs at a time" ;;
      burst+pack) label="ffmpeg burst, then fidelityfs pack" ;;
    esac
    printf '| %s | %.2f | %.1f | %.2fx | %.2fx |\n' "$label" "$(med "$c" s)" "$(med "$c" fps)" "$(ratio "$c" burst)" \
      "$(ratio "$c" burst+pack)"
  done
  local fb fp
  fb=$(med burst frames) fp=$(med pack frames)
  [[ $fb == "$fp" ]] || printf '\nnote: the burst wrote %s frames, pack --video-frames %s\n' "$fb" "$fp"
}

# row LABEL BYTES: a row of the bytes table.
row() { printf '| %s | %.1f | %.1fx |\n' "$1" "$(mb "$2")" "$(x "$2 / $videos_b")"; }
# bytes_table: the bytes of the last run's outputs, against the videos'.
bytes_table() {
  local full l5 src
  read -r full l5 src < <(level_bytes "$out/store")
  videos_b=$(file_bytes "$set" '*.mp4')
  frames_full=$full frames_l5=$l5
  printf '\n## bytes (%s videos)\n\n| data | MB | vs videos |\n| --- | ---: | ---: |\n' "$count"
  row "videos (H.264 .mp4)" "$videos_b"
  row "frames, quality 95, as encoded (before levels)" "$src"
  row "frames at full (store's level 10)" "$full"
  row "frames at level 5" "$l5"
  row "store on disk (du -b, all levels)" "$(du -sb "$out/store" | cut -f1)"
  if [[ -n $matched ]]; then
    read -r full l5 src < <(level_bytes "$out/store-matched")
    row "frames at full, quality $matched" "$full"
    row "frames at level 5, quality $matched" "$l5"
  fi
  row "ffmpeg -q:v $qv burst's JPEGs (du -b)" "$(du -sb "$out/burst" | cut -f1)"
  read -r full l5 src < <(level_bytes "$out/store-burst")
  row "burst packed: full (level 10)" "$full"
  row "burst packed: level 5" "$l5"
}

# hour_rss: peak RSS of pack --video-frames fps=1 on the hour-long video; sets hour_mib.
hour_rss() {
  local dir first dur n t0 t1 stored
  first=$(find "$set" -type f -name '*.mp4' | sort | head -1)
  dir=$(hour_video "$first")
  dur=$(ffprobe -v error -show_entries format=duration -of default=nw=1:nk=1 "$dir/long.mp4")
  n=$(ffprobe -v error -select_streams v:0 -show_entries stream=nb_frames -of default=nw=1:nk=1 "$dir/long.mp4")
  rm -rf "$out/store-hour"
  drop
  t0=$(now)
  /usr/bin/time -f %M -o "$out/hour.rss" "$bin" pack "$dir" "$out/store-hour" --video-frames fps=1 --jobs "$jobs" \
    --progress off >"$out/hour.log"
  t1=$(now)
  hour_mib=$(x "$(tail -1 "$out/hour.rss") / 1024")
  stored=$(frames_of "$out/hour.log")
  hour_s=$(x "$t1 - $t0")
  printf '\n## one long video: %s (%.0f s, %s frames at 30 fps, %.1f MB)\n\n' "$dir/long.mp4" "$dur" "$n" \
    "$(mb "$(file_bytes "$dir")")"
  printf 'pack --video-frames fps=1 --jobs %s: %s frames kept, every one of the %s decoded; %.1f s (%.0f decoded frames/s);' \
    "$jobs" "$stored" "$n" "$hour_s" "$(x "$n / $hour_s")"
  printf ' peak RSS %.0f MiB\n' "$hour_mib"
}

set=$(make_set "$count")
matched=''
if [[ ${MATCH:-1} == 1 ]]; then
  # 4 videos spread over the set (the first of each quarter)
  mapfile -t sample < <(find "$set" -type f -name '*.mp4' | sort |
    awk -v s=$((count >= 4 ? count / 4 : 1)) '(NR - 1) % s == 0' | head -4)
  quality_probe "${sample[@]}"
fi
contenders=(pack ${matched:+matched} burst burst+pack)
declare -A R=()
for ((r = 1; r <= runs; r++)); do one_run; done
speed_table
bytes_table
hour_mib=''
if [[ ${HOUR:-1} == 1 ]]; then hour_rss; fi

mkdir -p "$BENCH_DIR/results"
{
  printf '{"videos": %s, "jobs": %s, "qv": %s, "matched_quality": %s, ' "$count" "$jobs" "$qv" "${matched:-null}"
  printf '"contenders": %s, ' "$(runs_json contenders s fps frames)"
  printf '"bytes": {"videos": %s, "frames_full": %s, "frames_level5": %s}, ' "$videos_b" "$frames_full" "$frames_l5"
  printf '"hour_peak_rss_mib": %s}\n' "${hour_mib:-null}"
} >"$BENCH_DIR/results/video_frames.json"
printf '\nvideo_frames: pack --video-frames %.1f frames/s, ffmpeg burst %.1f frames/s (%.2fx), burst+pack %.1f frames/s (%.2fx);' \
  "$(med pack fps)" "$(med burst fps)" "$(ratio pack burst)" "$(med burst+pack fps)" "$(ratio pack burst+pack)"
printf ' bytes videos %.1f MB, frames full %.1f MB (%.1fx), level 5 %.1f MB (%.1fx);' "$(mb "$videos_b")" "$(mb "$frames_full")" \
  "$(x "$frames_full / $videos_b")" "$(mb "$frames_l5")" "$(x "$frames_l5 / $videos_b")"
if [[ -n $hour_mib ]]; then printf ' hour-long video peak RSS %.0f MiB\n' "$hour_mib"
else printf ' hour-long video peak RSS skipped (HOUR=0)\n'; fi
