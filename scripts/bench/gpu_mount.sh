#!/usr/bin/env bash
# The mount with gpu=on against gpu=off on FHD PNGs (>= 240 for the figures of docs/BENCHMARKS.md):
# files/s, GB/s, the daemon's host CPU per file, views decoded and FUSE reads per file, with the
# daemon on every core and on 4 (a node whose CPUs the training job needs); 16 readbench threads
# and 16 Python np.load threads; 3 rounds, a fresh mount per run (scripts/bench/gpu_mount.py).
# Runs as it is on a machine with a GPU (../shared/gpu/run.sh calls it): python3 with numpy, and
# fidelityfs and readbench from FIDELITYFS_BIN / READBENCH_BIN, PATH or this checkout's build/.
# Without a GPU, GPU_MODES=emulate,off (gpu=on falls back to emulate by itself). MOUNT_USER=NAME
# mounts as that user (needs user_allow_other in /etc/fuse.conf): a mount that cannot raise its
# readahead, as on a node where the daemon is not root.
#   scripts/bench/gpu_mount.sh PNG_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[[ $# -eq 1 && -d $1 ]] || { echo "usage: $0 PNG_DIR" >&2; exit 2; }
find_bin() {  # NAME ENV_VALUE BUILD_PATH
  if [[ -n $2 ]]; then echo "$2"
  elif command -v "$1" >/dev/null; then command -v "$1"
  elif [[ -x $root/$3 ]]; then echo "$root/$3"
  else echo "$0: no $1 (on PATH, in build/, or set it in the environment)" >&2; exit 2
  fi
}
fid=$(find_bin fidelityfs "${FIDELITYFS_BIN:-}" build/cli/fidelityfs)
readbench=$(find_bin readbench "${READBENCH_BIN:-}" build/scripts/bench/readbench)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-mount.XXXXXX")
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
"$fid" --version | head -2
py=python3  # the one with numpy: on PATH (the GPU machine), else Debian's
$py -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
$py "$here/gpu_mount.py" "$1" --fidelityfs "$fid" --readbench "$readbench" --modes "${GPU_MODES:-on,off}" \
  --rounds "${ROUNDS:-3}" --work "$work" --budget-s "${GPU_MOUNT_BUDGET_S:-185}" --mount-user "${MOUNT_USER:-}"
