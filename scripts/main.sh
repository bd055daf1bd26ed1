#!/usr/bin/env bash
# The main job: installs missing packages, builds mixprec, runs the seed page's four examples
# and then the demo of what loss scaling buys (table, demo_out/log.csv, demo_out/plot.png).
#
# Which LibTorch (it says which, with its version and where from, first and last):
#   default (MIXPREC_TORCH unset or auto): today's PyTorch, LibTorch 2.15 of the torch wheel from
#     PyPI, in the venv that scripts/test.sh uses too (scripts/lib/torch_venv.sh: made once, about
#     3.0 GB to download), built in build-torch/ without mixprec's CUDA kernels unless torch sees a
#     GPU (the wheel's CMake config still needs a CUDA toolkit >= 12.6: /usr/local/cuda, $CUDACXX
#     or nvcc on PATH). Where that cannot be (no such toolkit, PyPI unreachable), Debian's LibTorch,
#     saying why.
#   MIXPREC_TORCH=system: Debian's LibTorch (1.13 on Debian 12, 2.6 on Debian 13), in build/.
#   MIXPREC_TORCH=pypi: the wheel or fail (no fallback).
# Usage: scripts/main.sh [demo flags, e.g. --steps 3000]   (build folder: $MIXPREC_BUILD_DIR, if set)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${MIXPREC_TORCH:-auto}
case $mode in
  auto | pypi | system) ;;
  *)
    echo "main.sh: MIXPREC_TORCH=$mode: expected auto (the default), pypi or system" >&2
    exit 2
    ;;
esac
bash scripts/install_deps.sh
source scripts/lib/torch_venv.sh

torch=system
why=""  # why not the wheel, when mode is auto or pypi
if [[ $mode == system ]]; then
  why="MIXPREC_TORCH=system"
elif ! NVCC=$(torch_venv_nvcc); then
  why="no CUDA toolkit (the torch wheel's CMake config needs nvcc >= 12.6: none in \$CUDACXX, on"
  why+=" PATH or in /usr/local/cuda/bin)"
elif nvcc_version=$(torch_venv_nvcc_version "$NVCC") &&
  ! printf '12.6\n%s\n' "$nvcc_version" | sort -V -C; then
  why="$NVCC is CUDA $nvcc_version; the torch wheel's CMake config needs >= 12.6"
elif ! torch_venv_open; then
  why="the torch wheel could not be installed from PyPI: pip failed (above); no network?"
else
  torch=pypi
fi
if [[ $torch == system && $mode == pypi ]]; then
  echo "main.sh: MIXPREC_TORCH=pypi, but $why" >&2
  exit 1
fi

first_configure=()
if [[ $torch == pypi ]]; then
  BUILD_DIR=${MIXPREC_BUILD_DIR:-build-torch}
  export CMAKE_PREFIX_PATH=$TORCH_ROOT  # the torch package's folder (docs/install.md)
  export CUDACXX=$NVCC
  # Without it (and without a GPU to detect) the wheel's config would put sm_50 in its CUDA flags,
  # which nvcc 13 no longer compiles.
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-7.5;8.0;9.0}
  # The demo trains on the CPU unless torch sees a GPU: then mixprec's kernels are needed (for
  # this GPU alone), else building them would only lengthen the job.
  if ((TORCH_WHEEL_GPU)); then
    first_configure=(-DMIXPREC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native)
  else
    first_configure=(-DMIXPREC_WITH_CUDA=OFF)
  fi
else
  BUILD_DIR=${MIXPREC_BUILD_DIR:-build}
  if [[ $mode != system ]]; then
    why="the fallback: $why"
    echo "== LibTorch: Debian's, $why"
  fi
fi
# check_torch_dir: the build folder's LibTorch (its cached Torch_DIR) is the one chosen; a folder
# configured against the other is left as it is.
check_torch_dir() {
  torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$BUILD_DIR/CMakeCache.txt")
  if [[ $torch == pypi && $torch_dir != "$TORCH_ROOT"/* ]]; then
    echo "main.sh: $BUILD_DIR/ was configured against the LibTorch in $torch_dir, not the torch" \
      "wheel's ($TORCH_ROOT): delete it, or set MIXPREC_BUILD_DIR to another folder" >&2
    exit 1
  elif [[ $torch == system && $torch_dir == "$TORCH_VENV"/* ]]; then
    echo "main.sh: $BUILD_DIR/ was configured against the torch wheel's LibTorch ($torch_dir)," \
      "not the system's: delete it, or set MIXPREC_BUILD_DIR to another folder" >&2
    exit 1
  fi
}
configure_log=$(mktemp)
trap 'rm -f "$configure_log"' EXIT
if [[ -f $BUILD_DIR/CMakeCache.txt ]]; then
  # A folder that is configured already keeps its settings (scripts/test.sh's stages reuse theirs).
  check_torch_dir
  cmake -S . -B "$BUILD_DIR" | tee "$configure_log"
else
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${first_configure[@]}" |
    tee "$configure_log"
fi
check_torch_dir

# Which LibTorch the run uses: the configure's own line, the wheel or Debian's package, Torch_DIR.
version=$(sed -n 's/^-- mixprec: LibTorch \([0-9][0-9.]*\) .*/\1/p' "$configure_log" | head -n1)
if [[ $torch == pypi ]]; then
  used="LibTorch $version: the PyPI torch wheel (torch $TORCH_WHEEL_VERSION, CUDA $TORCH_WHEEL_CUDA,"
  used+=" in $TORCH_VENV), build folder $BUILD_DIR"
else
  package=$(dpkg-query -W -f='${Package} ${Version}' libtorch-dev 2>/dev/null ||
    dpkg-query -W -f='${Package} ${Version}' libtorch-cuda-dev 2>/dev/null || true)
  used="LibTorch $version: Debian's (${package:-no libtorch-dev package}, $torch_dir), build"
  used+=" folder $BUILD_DIR; $why"
fi
echo "== $used"

# Only what this job runs: not the test suite (scripts/test.sh builds that).
cmake --build "$BUILD_DIR" -j "$(nproc)" --target seed_example_1 seed_example_2 seed_example_3 \
  seed_example_4 raw_loss_scaler mixprec_demo

# The seed page's examples, each printing the seed's lines (the seed's Python code is above each
# file's C++ line by line), and the core-only LossScaler.
seed_titles=(
  ""
  "GradScaler() with the default settings"
  "GradScaler with custom parameters (Initial scale: 1024.0)"
  "the basic training loop (Epoch 1: scale=65536.0, Epoch 2: scale=65536.0)"
  "a disabled scaler (Scaler enabled: False)"
)
for n in 1 2 3 4; do
  echo "== seed example $n: ${seed_titles[$n]}"
  "$BUILD_DIR/examples/seed_example_$n"
done
echo "== raw_loss_scaler: the LossScaler of mixprec::core, without LibTorch"
"$BUILD_DIR/examples/raw_loss_scaler"

echo
echo "== mixprec_demo: what loss scaling buys (docs/demo.md)"
"$BUILD_DIR/examples/mixprec_demo" --out demo_out "$@"
echo
echo "== the main job ran on $used"
