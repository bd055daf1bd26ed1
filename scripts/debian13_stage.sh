#!/usr/bin/env bash
# The test suite's LibTorch 2.6 stage, run by scripts/test.sh on Debian 12: the whole suite (build,
# every CTest test, the main job) again in a Debian 13 root, against Debian 13's LibTorch 2.6.0 and
# python3-torch 2.6.0, where the differential tests against PyTorch's own kernels and
# torch.amp.GradScaler("cpu") run. Needs root (debootstrap, chroot, mount).
#
# The root is made with debootstrap when missing and kept for later runs on this machine in
# $MIXPREC_DEBIAN13_ROOT (default /var/cache/mixprec/debian13-root); its packages come from
# scripts/install_deps.sh, run inside it each time (a no-op when nothing is missing). The checkout
# is copied in afresh (/mixprec in the root) and built from scratch, so nothing is reused but the
# installed packages.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debian_root.sh
ROOT=${MIXPREC_DEBIAN13_ROOT:-/var/cache/mixprec/debian13-root}
if [[ $(id -u) -ne 0 ]]; then
  echo "scripts/debian13_stage.sh: needs root (debootstrap, chroot); set MIXPREC_SKIP_DEBIAN13=1" \
    "to leave the LibTorch 2.6 stage out of a local run" >&2
  exit 2
fi

t0=$(date +%s)
if [[ ! -x $ROOT/usr/bin/apt-get ]]; then
  make_debian_root trixie "$ROOT"
fi
mount_debian_root "$ROOT"
trap 'umount_debian_root "$ROOT"' EXIT
copy_checkout . "$ROOT/mixprec"
in_debian_root "$ROOT" "bash /mixprec/scripts/install_deps.sh"
echo "== Debian 13 root ready ($ROOT): $(seconds_since "$t0") s"
# The sanitizer and fuzzing stage runs once per CI run, on Debian 12 (clang 14); on a Debian 13
# machine scripts/test.sh runs it with clang 19.
in_debian_root "$ROOT" "cd /mixprec && MIXPREC_SKIP_SANITIZERS=1 bash scripts/test.sh"
