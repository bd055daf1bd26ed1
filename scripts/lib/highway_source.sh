#!/usr/bin/env bash
# Puts the Highway release that cmake/MixprecHighway.cmake pins into a cache folder, for the
# packaging test of the FetchContent fallback (tests/packaging, packaging.highway_fetched), which
# cannot reach GitHub in CI. Debian 13's source package of Highway has that release's GitHub
# archive as its orig tarball, byte for byte (same SHA256), so `apt-get source` through Debian's
# mirror fetches it. apt's own configuration is left alone: a private sources list with one
# deb-src line and private lists and cache folders. Called by scripts/install_deps.sh (root).
# Idempotent: does nothing when the tarball is there with the pinned SHA256.
#
# Usage: scripts/lib/highway_source.sh [CACHE_DIR]   (default /var/cache/mixprec/highway-src)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/debian_root.sh"  # debian_source_download
cache=${1:-/var/cache/mixprec/highway-src}
pins=$here/../../cmake/MixprecHighway.cmake
version=$(sed -n 's/^set(MIXPREC_HIGHWAY_VERSION \([0-9.]*\))$/\1/p' "$pins")
sha256=$(sed -n 's/^set(MIXPREC_HIGHWAY_SHA256 \([0-9a-f]*\))$/\1/p' "$pins")
if [[ -z $version || -z $sha256 ]]; then
  echo "highway_source.sh: no MIXPREC_HIGHWAY_VERSION/SHA256 in $pins" >&2
  exit 1
fi
tarball=$cache/highway_$version.orig.tar.gz
if [[ -f $tarball ]] && echo "$sha256  $tarball" | sha256sum -c --status; then
  exit 0
fi

# Debian 13 (trixie) packages Highway 1.2.0; Debian 12's 1.0.3 is not the pinned release.
suite=trixie
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "mixprec: fetching Highway $version's sources (Debian $suite's source package) into $cache"
debian_source_download highway "$suite" "$work/src"
if [[ ! -f $work/src/highway_$version.orig.tar.gz ]]; then
  echo "highway_source.sh: Debian $suite's highway source is not Highway $version:" \
    "$(ls "$work/src")" >&2
  exit 1
fi
if ! echo "$sha256  $work/src/highway_$version.orig.tar.gz" | sha256sum -c --status; then
  echo "highway_source.sh: highway_$version.orig.tar.gz does not have the pinned SHA256" \
    "(cmake/MixprecHighway.cmake)" >&2
  exit 1
fi
mkdir -p "$cache"
mv "$work/src/highway_$version.orig.tar.gz" "$tarball.partial"
mv "$tarball.partial" "$tarball"
echo "mixprec: $tarball"
