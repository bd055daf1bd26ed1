#!/usr/bin/env bash
# The sources that scripts/gpu_check.sh builds on a GPU machine without a package registry
# (docs/gpu_check.md): GoogleTest (Debian's googletest package, /usr/src/googletest), Highway 1.2.0
# (the release cmake/MixprecHighway.cmake pins, from scripts/lib/highway_source.sh), Google
# Benchmark (Debian 12's source package, 1.7.1) and Random123's headers (Debian's librandom123-dev,
# /usr/include/Random123: the FP4 kernels' Philox), unpacked into DEST (default gpu_check_src/,
# which git ignores), each in a folder of its own. The device tool carries DEST with the checkout
# (`carry: ["gpu_check_src"]`): the script stops if it is larger than the 64 MiB the tool carries.
# Needs root (apt-get source through a private apt configuration) and network, once.
# Usage: scripts/lib/gpu_check_sources.sh [DEST]; then
#   GTEST_SOURCE_DIR=DEST/googletest HWY_SOURCE_DIR=DEST/highway BENCHMARK_SOURCE_DIR=DEST/benchmark
#   RANDOM123_INCLUDE_DIR=DEST/random123
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/debian_root.sh"  # debian_source_download
dest=${1:-$here/../../gpu_check_src}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
limit_kib=$((64 * 1024))

if [[ ! -f /usr/src/googletest/CMakeLists.txt ]]; then
  echo "gpu_check_sources.sh: /usr/src/googletest is missing (Debian: googletest, which" \
    "libgtest-dev brings; scripts/install_deps.sh installs it)" >&2
  exit 1
fi
if [[ ! -f /usr/include/Random123/philox.h ]]; then
  echo "gpu_check_sources.sh: /usr/include/Random123 is missing (Debian: librandom123-dev;" \
    "scripts/install_deps.sh installs it)" >&2
  exit 1
fi
rm -rf "$dest/googletest" "$dest/highway" "$dest/benchmark" "$dest/random123"
cp -r /usr/src/googletest "$dest/googletest"
mkdir -p "$dest/random123"
cp -r /usr/include/Random123 "$dest/random123/Random123"  # header-only: the include folder is all

highway_cache=/var/cache/mixprec/highway-src
bash "$here/highway_source.sh" "$highway_cache"
mkdir -p "$dest/highway"
tar -xzf "$highway_cache"/highway_*.orig.tar.gz -C "$dest/highway" --strip-components=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debian_source_download benchmark bookworm "$work"
mkdir -p "$dest/benchmark"
tar -xzf "$work"/benchmark_*.orig.tar.gz -C "$dest/benchmark" --strip-components=1

size_kib=$(du -sk "$dest" | cut -f1)
echo "gpu_check_sources.sh: $dest: googletest, highway, benchmark, random123," \
  "$((size_kib / 1024)) MiB"
if ((size_kib > limit_kib)); then
  echo "gpu_check_sources.sh: $dest is larger than the 64 MiB the device tool carries" >&2
  exit 1
fi
