#!/usr/bin/env bash
# A new user's first hour, as the README tells it, on sample data: pack, inspect, verify, mount at
# a level, look inside (ls, getfattr, stats), change a level, measure the levels with quality,
# read the mount with a torchvision DataLoader, and unmount. Each command is printed with `$ `
# before its output. Needs a built binary (FIDELITYFS_BIN, default build/cli/fidelityfs) and
# runs in the test suite (tests/integration/test_tour.py). Everything lands in $TOUR_DIR
# (default: a new temporary folder, removed at the end); the mount is always unmounted.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fidelityfs=${FIDELITYFS_BIN:-$root/build/cli/fidelityfs}
[[ -x $fidelityfs ]] || { echo "tour: no binary at $fidelityfs: build it first (scripts/build.sh)" >&2; exit 2; }
work=${TOUR_DIR:-$(mktemp -d /tmp/fidelityfs-tour.XXXXXX)}
[[ -n ${TOUR_DIR:-} ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
fidelityfs() { "$fidelityfs" "$@"; }

# Prints a command as a user would type it (words with blanks or other specials quoted), then
# runs it.
run() {
  local word line='$'
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_./=,:@%+-]+$ ]]; then line+=" $word"; else line+=" '$word'"; fi
  done
  echo "$line"
  "$@"
  echo
}

/usr/bin/python3 "$root/tests/fixtures/make_tree.py" --kind imagenet --count 60 --classes 3 --out "$work/photos" >/dev/null

run fidelityfs pack "$work/photos" "$work/photos.fid" --progress off
run fidelityfs inspect "$work/photos.fid"
run fidelityfs verify "$work/photos.fid" --progress off

mnt=$work/mnt
mkdir -p "$mnt"
run fidelityfs mount "$work/photos.fid" "$mnt" -o scan_group=5
trap 'fusermount3 -u "$mnt" 2>/dev/null || true; [[ -n ${TOUR_DIR:-} ]] || rm -rf "$work"' EXIT
run ls "$mnt"
class=$(ls "$mnt" | sed -n 1p)
file=$mnt/$class/$(ls "$mnt/$class" | sed -n 1p)
run getfattr -d -m user.fidelity "$file"
run stat -c '%n: %s bytes at level 5' "$file"
run setfattr -n user.fidelity.scan_group -v full "$mnt/$class"
run stat -c '%n: %s bytes at full' "$file"
run ls "$mnt/.fidelity/sg"

cat >"$work/loader.py" <<'EOF'
import sys

import torch
from torchvision import datasets, transforms

data = datasets.ImageFolder(sys.argv[1], transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()]))
batches = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True, num_workers=2)
images = sum(len(x) for x, _ in batches)
print(f"{images} images in {len(data.classes)} classes read through the mount")
EOF
run /usr/bin/python3 "$work/loader.py" "$mnt"
run fidelityfs stats "$mnt"
run fidelityfs quality "$work/photos.fid" --sample 20 --progress off
run fusermount3 -u "$mnt"
echo "tour: done"
