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
source "$here/debian_root.sh"  # debian_mirror
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
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror) $suite main" \
  >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
echo "mixprec: fetching Highway $version's sources (Debian $suite's source package) into $cache"
apt-get "${apt_opts[@]}" -qq update
# --download-only: the .dsc, orig tarball and Debian diff, checked against the signed index.
(cd "$work/src" && apt-get "${apt_opts[@]}" -qq source --download-only "highway/$suite")
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
