#!/usr/bin/env bash
# Checks the README's two Quick start commands as a newcomer meets them: in a minimal Debian root
# made with debootstrap (nothing installed but the base system), a clone of this checkout runs
# `bash scripts/main.sh` and then `bash scripts/test.sh` with a clean environment, and one line per
# command says how it ended. Not part of CI: each release takes about as long as two full builds
# plus the package installs. Needs root (debootstrap, chroot, mount).
#
# Usage: scripts/fresh_machine_check.sh [bookworm] [trixie]   (default: both)
#   Roots and logs go to $MIXPREC_FRESH_DIR (default /var/tmp/mixprec-fresh); each run makes new
#   roots. The clone is of HEAD (commit first: uncommitted changes are not in it).
#   On bookworm, scripts/test.sh also makes its own venv (the torch 2.15 wheel from PyPI) and its
#   own Debian 13 root inside the fresh one (the LibTorch 2.15 and 2.6 stages), as CI does on a
#   new machine. This machine kind comes with the CUDA toolkit in /usr/local/cuda (not a Debian
#   package: install_deps.sh does not install it): it is bind-mounted, read-only, into the fresh
#   bookworm root, where the current-PyTorch stage's nvcc comes from. After the two README
#   commands, the stage CI no longer runs, LibTorch 2.6's CUDA build (scripts/debian13_stage.sh
#   cuda), runs in the same fresh root and is reported on a line of its own
#   (MIXPREC_FRESH_DEBIAN13_CUDA=0 leaves it out).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debian_root.sh
if [[ $(id -u) -ne 0 ]]; then
  echo "scripts/fresh_machine_check.sh: needs root (debootstrap, chroot)" >&2
  exit 2
fi
suites=("$@")
((${#suites[@]} > 0)) || suites=(bookworm trixie)
work=${MIXPREC_FRESH_DIR:-/var/tmp/mixprec-fresh}
mkdir -p "$work"
checkout=$PWD
results=()
status=0
# run_in_root ROOT LOG SUITE COMMAND: COMMAND in the checkout of ROOT, output to LOG; its exit
# status and time go into results.
run_in_root() {
  local root=$1 log=$2 suite=$3 cmd=$4 t0 rc
  t0=$(date +%s)
  echo "== $suite: $cmd (log: $log)"
  in_debian_root "$root" "cd /mixprec && $cmd" >"$log" 2>&1
  rc=$?
  tail -n 5 "$log"
  results+=("$suite: $cmd -> exit $rc in $(seconds_since "$t0") s (log: $log)")
  ((rc == 0)) || status=1
}
for suite in "${suites[@]}"; do
  root=$work/$suite
  remove_debian_root "$root" || exit 1
  t0=$(date +%s)
  if ! make_debian_root "$suite" "$root"; then
    results+=("$suite: debootstrap FAILED (see $root.debootstrap.log)")
    status=1
    continue
  fi
  git clone -q "$checkout" "$root/mixprec"
  # What the machine brings that no package does: the CAs it trusts (this workplace reaches PyPI
  # through a TLS proxy whose CA is in /usr/local/share/ca-certificates; without it pip fails in the
  # root with CERTIFICATE_VERIFY_FAILED) and pip's configuration. The ca-certificates package,
  # which scripts/install_deps.sh brings, adds them to the root's bundle.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
  [[ ! -f /etc/pip.conf ]] || cp /etc/pip.conf "$root/etc/pip.conf"
  trap 'umount_below "$root"' EXIT
  mount_debian_root "$root"
  cuda=$(realpath -e /usr/local/cuda 2>/dev/null || true)
  if [[ $suite == bookworm && -n $cuda ]]; then  # the current-PyTorch stage's nvcc
    mkdir -p "$root$cuda"
    mount --bind "$cuda" "$root$cuda" && mount -o remount,bind,ro "$root$cuda"
    [[ $cuda == /usr/local/cuda ]] || ln -sfn "$cuda" "$root/usr/local/cuda"
  fi
  echo "== $suite root made and cloned in $(seconds_since "$t0") s"
  for cmd in "bash scripts/main.sh" "bash scripts/test.sh"; do
    run_in_root "$root" "$work/$suite-$(basename "${cmd##* }" .sh).log" "$suite" "$cmd"
  done
  if [[ $suite == bookworm && ${MIXPREC_FRESH_DEBIAN13_CUDA:-1} != 0 ]]; then  # the stage out of CI: LibTorch 2.6's CUDA build
    run_in_root "$root" "$work/$suite-debian13-cuda.log" "$suite" "bash scripts/debian13_stage.sh cuda"
  fi
  # Unmount (test.sh's own Debian 13 root inside a bookworm root has mounts too); keep the files.
  umount_below "$root"
done
echo "== fresh machine check:"
printf '%s\n' "${results[@]}"
exit $status
