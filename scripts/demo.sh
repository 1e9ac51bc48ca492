#!/usr/bin/env bash
# The main job on sample data, on a fresh Debian machine: installs what it needs, builds,
# makes a small ImageFolder tree of real photos (synthetic ones when ../shared is absent),
# packs it, mounts it, and shows it at two fidelities. Everything lands in $DEMO_DIR
# (default /tmp/fidelityfs-demo); the mount is always unmounted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${DEMO_DIR:-/tmp/fidelityfs-demo}
bin=$root/build/cli/fidelityfs
scripts/deps.sh build
# Only the binary the demo runs: no unit tests (GoogleTest is not among the build dependencies),
# no benchmark programs.
BUILD_DIR=build BUILD_TARGETS=fidelityfs scripts/build.sh -DFIDELITYFS_TESTS=OFF
mkdir -p "$work"

src=$work/src
if [[ ! -d $src ]]; then
  shared=$root/../shared/datasets
  if [[ -x $shared/fetch-photos.sh ]] && photos=$("$shared/fetch-photos.sh" | tail -1) && [[ -d $photos ]]; then
    /usr/bin/python3 "$shared/make_imagefolder.py" --photos "$photos" --kind imagenet --count 400 --classes 4 --out "$src"
  else
    /usr/bin/python3 tests/fixtures/make_tree.py --kind imagenet --count 400 --classes 4 --out "$src"
  fi
fi

store=$work/store
rm -rf "$store"
echo "== fidelityfs pack $src $store"
"$bin" pack "$src" "$store"
echo "== fidelityfs inspect $store"
"$bin" inspect "$store"

mnt=$work/mnt
mkdir -p "$mnt"
fusermount3 -u "$mnt" 2>/dev/null || true
echo "== fidelityfs mount $store $mnt -o scan_group=5"
"$bin" mount "$store" "$mnt" -o scan_group=5
trap 'fusermount3 -u "$mnt"' EXIT
ls "$mnt"
first=$(find "$mnt" -name '*.JPEG' | sort | sed -n 1p)  # sed reads to the end: no SIGPIPE for sort under pipefail
echo "== one file at level 5 (mount option) and at full fidelity (setfattr)"
stat -c '%n %s bytes' "$first"
getfattr -d -m user.fidelity "$first"
setfattr -n user.fidelity.scan_group -v full "$first"
stat -c '%n %s bytes' "$first"
/usr/bin/python3 -c "import sys; from PIL import Image; im = Image.open(sys.argv[1]); im.load(); print('decodes:', im.size, im.mode)" "$first"
du -sh --apparent-size "$src" "$mnt" | sed 's/^/size at level 5: /'
