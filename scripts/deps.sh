#!/usr/bin/env bash
# Installs the Debian packages fidelityfs needs to build, test and benchmark. Idempotent: only
# missing packages are installed. Usage: scripts/deps.sh [build|test|bench]
set -euo pipefail
what=${1:-build}
pkgs=(build-essential cmake pkg-config libfuse3-dev fuse3 libjpeg62-turbo-dev libturbojpeg0-dev
      libjpeg-turbo-progs libsqlite3-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
      libfmt-dev liburing-dev libspng-dev libarchive-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libcurl4-openssl-dev libssl-dev libpng-dev attr python3 python3-pil python3-numpy
      dpkg-dev file)  # the last two: cpack's Debian package (dpkg-shlibdeps, and file to find the binaries)
if [[ $what == test || $what == bench ]]; then
  pkgs+=(libgtest-dev clang libclang-rt-14-dev python3-pytest python3-xxhash python3-torch python3-torchvision
         parallel zstd python3-setuptools python3-wheel python3-pip python3-prometheus-client python3-skimage python3-yaml python3-matplotlib man-db universal-ctags
         nginx-light openssl curl awscli ffmpeg radosgw ceph-mon ceph-osd ceph-common strace)
fi
if [[ $what == bench ]]; then
  pkgs+=(squashfuse squashfs-tools bc libwebp-dev webp python3-matplotlib libbenchmark-dev s3fs rclone iproute2
         librsvg2-bin xvfb x11-apps x11-utils xterm)  # the last five: make_graphics_set.py
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
