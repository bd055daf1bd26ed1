#!/usr/bin/env bash
# The test suite's current-PyTorch stage, run by scripts/test.sh on Debian 12: mixprec against
# LibTorch 2.15.0 as most LibTorch users get it today, the `torch` wheel from PyPI (its torch/
# folder: headers, libraries, CMake config), installed with scripts/lib/current_torch.txt into a
# virtual environment (scripts/lib/torch_venv.sh, shared with scripts/main.sh, whose default
# LibTorch it is; kept: $MIXPREC_TORCH_VENV, default /var/cache/mixprec/torch-current-venv,
# remade when that file changes).
#
# The build is the wheel's CUDA build: nvcc 13 (the CUDA toolkit of /usr/local/cuda, or $CUDACXX,
# or nvcc on PATH) compiles mixprec's kernels, and MIXPREC_WITH_CUDA must come out ON
# (MIXPREC_REQUIRE_CUDA=1); LibTorch's cuDNN, NCCL and CUDA libraries are the wheel's real
# nvidia-* packages, found through its RPATH. Distributed is built with Gloo (Debian's
# libgloo-dev headers; the wheel ships none) and NCCL. Then scripts/test.sh's build, CTest and
# main-job stages run in build folder build-torch-current/ (the sanitizers are Debian 12's and
# Debian 13's stages'; the main job is main.sh's default path, the wheel, reusing that build, with
# MIXPREC_TORCH=pypi so that it cannot fall back to Debian's LibTorch unnoticed), with the venv's
# python3 first on PATH, so the `python` tests compare with that same torch 2.15: the differential
# against torch.amp.GradScaler("cpu") and PyTorch's kernels, the checkpoint and C ABI interop, the
# messages and the FP8 references.
#
# The wheel's CMake config needs two things that docs/install.md tells users too: CMAKE_PREFIX_PATH
# is the torch package's folder (not torch/share/cmake: its config would find Debian's libc10.so
# first), and TORCH_CUDA_ARCH_LIST is set (without a GPU to detect it picks sm_50 among its
# "common architectures", which nvcc 13 no longer compiles).
# Usage: scripts/current_torch_stage.sh   (needs network access to PyPI the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/torch_venv.sh  # the venv, shared with scripts/main.sh

if ! NVCC=$(torch_venv_nvcc); then
  echo "current_torch_stage.sh: no nvcc (not \$CUDACXX, not on PATH, not /usr/local/cuda/bin):" \
    "this stage builds mixprec's CUDA kernels against the torch wheel's CUDA LibTorch and needs" \
    "a CUDA toolkit >= 12.6 (LibTorch >= 2.13's requirement)" >&2
  exit 2
fi

t0=$(date +%s)
torch_venv_open || {
  echo "current_torch_stage.sh: could not make $TORCH_VENV from $TORCH_VENV_REQUIREMENTS" \
    "(pip failed: is PyPI reachable?)" >&2
  exit 1
}
echo "== torch $TORCH_WHEEL_VERSION CUDA $TORCH_WHEEL_CUDA in $TORCH_VENV ($(($(date +%s) - t0)) s);" \
  "nvcc: $NVCC ($(torch_venv_nvcc_version "$NVCC"))"

PATH="$TORCH_VENV/bin:$(dirname "$NVCC"):$PATH"
export PATH
export CMAKE_PREFIX_PATH=$TORCH_ROOT
export CUDACXX=$NVCC
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-7.5;8.0;9.0}
export MIXPREC_BUILD_DIR=${MIXPREC_CURRENT_TORCH_BUILD_DIR:-build-torch-current}
# packaging.fetchcontent and packaging.highway_fetched build mixprec once more each (2.5 and 0.75
# minutes here) to test CMake logic that does not depend on the LibTorch: the Debian 12 stage runs
# them. packaging.find_package (the exported C++20) and packaging.add_subdirectory_after_torch
# (which meets the wheel's own CUDA settings) run here.
MIXPREC_SKIP_SANITIZERS=1 MIXPREC_SKIP_DEBIAN13=1 MIXPREC_SKIP_CURRENT_TORCH=1 MIXPREC_TORCH=pypi \
  MIXPREC_REQUIRE_CUDA=1 MIXPREC_CTEST_EXCLUDE='^packaging\.(fetchcontent|highway_fetched)$' \
  bash scripts/test.sh
