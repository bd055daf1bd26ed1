#!/usr/bin/env bash
# Tests of scripts/lib/debian_root.sh's safety: deleting a root never deletes through a bind mount
# left in it, also when the root's path has a space (which /proc/mounts writes as \040), and
# mounts_below decodes such paths. Needs root (mount); exits 77 (skipped) otherwise.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib/debian_root.sh"
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: needs root to bind-mount (CI runs as root)"
  exit 77
fi
work=$(mktemp -d)
host="$work/host dev"         # stands in for the machine's /dev
root="$work/a root/with space"
cleanup() { umount_below "$work"; rm -rf --one-file-system "$work"; }
trap cleanup EXIT
mkdir -p "$host" "$root/dev" "$root/proc"
echo keep >"$host/canary"
mount --bind "$host" "$root/dev"

fail() { echo "FAIL: $*"; exit 1; }
[[ $(mounts_below "$work") == "$root/dev" ]] ||
  fail "mounts_below did not find the bind mount at '$root/dev' (got '$(mounts_below "$work")')"
rc=0
remove_debian_root "$root" || rc=$?
[[ -f $host/canary ]] || fail "remove_debian_root deleted a file through the bind mount"
((rc == 0)) || fail "remove_debian_root exited $rc"
[[ ! -e $root ]] || fail "the root is still there"
echo "PASS: the root with a space in its path was removed, the bind-mounted folder kept"
