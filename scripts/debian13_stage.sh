#!/usr/bin/env bash
# The test suite's LibTorch 2.6 stages, run by scripts/test.sh on Debian 12, each in a Debian 13
# root of its own (Debian's CPU and CUDA builds of LibTorch conflict):
#   scripts/debian13_stage.sh cpu    LibTorch 2.6.0 (libtorch-dev) and python3-torch 2.6.0: the
#       sanitizers' ASan + UBSan part (the code LibTorch 2.x compiles differently), then the build,
#       every CTest test (the differential tests against PyTorch's own kernels and
#       torch.amp.GradScaler("cpu") among them) and the main job.
#   scripts/debian13_stage.sh cuda   Debian's CUDA LibTorch 2.6.0 (libtorch-cuda-dev, contrib),
#       python3-torch-cuda, nvcc 12.4 and NCCL: mixprec built with MIXPREC_WITH_CUDA's default,
#       which must be ON there, so every CUDA target builds and links (the kernels, the GPU tests,
#       the GPU benchmark and differential program, the NCCL path of mixprec/distributed.h); then
#       every CTest test (the GPU tests skip: no GPU) and the main job.
# Needs root (debootstrap, chroot, mount).
#
# A root is made with debootstrap when missing and kept for later runs on this machine:
# $MIXPREC_DEBIAN13_ROOT (default /var/cache/mixprec/debian13-root) and
# $MIXPREC_DEBIAN13_CUDA_ROOT (default /var/cache/mixprec/debian13-cuda-root); its packages come
# from scripts/install_deps.sh, run inside it each time (a no-op when nothing is missing). A lock
# beside the root keeps two runs from sharing it. The checkout is copied in afresh (/mixprec in the
# root) and built from scratch, so nothing is reused but the installed packages.
#
# The CUDA root, and it alone, declines nvidia-cudnn's license (its downloader cannot reach NVIDIA
# here) and gets a stand-in libcudnn.so.9 (scripts/lib/cudnn_stub.sh), marked as a CI root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debian_root.sh
flavour=${1:-cpu}
case $flavour in
  cpu)
    ROOT=${MIXPREC_DEBIAN13_ROOT:-/var/cache/mixprec/debian13-root}
    INSTALL_ARGS=""
    # TSan and the fuzzers test the core, the same code on both releases: Debian 12 runs them.
    # The packaging tests that build mixprec again (0.5-3.5 minutes each here) test the CMake package
    # against the oldest LibTorch (Debian 12 stage) and the newest (current-PyTorch stage).
    INNER="MIXPREC_SANITIZERS=asan"
    INNER+=" MIXPREC_CTEST_EXCLUDE='^packaging\.(find_package|fetchcontent|add_subdirectory_after_torch)$'"
    ;;
  cuda)
    ROOT=${MIXPREC_DEBIAN13_CUDA_ROOT:-/var/cache/mixprec/debian13-cuda-root}
    INSTALL_ARGS="--cuda"
    INNER="MIXPREC_SKIP_SANITIZERS=1 MIXPREC_REQUIRE_CUDA=1"
    ;;
  *)
    echo "usage: scripts/debian13_stage.sh cpu|cuda" >&2
    exit 2
    ;;
esac
if [[ $(id -u) -ne 0 ]]; then
  echo "scripts/debian13_stage.sh: needs root (debootstrap, chroot); set MIXPREC_SKIP_DEBIAN13=1" \
    "to leave the LibTorch 2.6 stages out of a local run" >&2
  exit 2
fi

t0=$(date +%s)
lock_debian_root "$ROOT"
trap 'umount_debian_root "$ROOT"' EXIT
if [[ ! -x $ROOT/usr/bin/apt-get ]]; then
  make_debian_root trixie "$ROOT"
fi
mount_debian_root "$ROOT"
if [[ $flavour == cuda ]]; then
  # contrib and non-free: libtorch-cuda-dev, nvidia-cuda-toolkit, libnccl-dev.
  sed -i -E 's/^(deb .* trixie main)$/\1 contrib non-free/' "$ROOT/etc/apt/sources.list"
  touch "$ROOT/etc/mixprec-ci-root"
  in_debian_root "$ROOT" \
    "echo 'nvidia-cudnn nvidia-cudnn/question select I Decline' | debconf-set-selections"
fi
copy_checkout . "$ROOT/mixprec"
in_debian_root "$ROOT" "bash /mixprec/scripts/install_deps.sh $INSTALL_ARGS"
if [[ $flavour == cuda ]]; then
  in_debian_root "$ROOT" "bash /mixprec/scripts/lib/cudnn_stub.sh"
fi
echo "== Debian 13 root ready ($flavour, $ROOT): $(seconds_since "$t0") s"
in_debian_root "$ROOT" "cd /mixprec && $INNER bash scripts/test.sh"
