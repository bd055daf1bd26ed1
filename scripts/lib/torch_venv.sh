# shellcheck shell=bash
# The virtual environment with today's PyTorch (the torch wheel of scripts/lib/current_torch.txt,
# from PyPI), shared by scripts/main.sh (its default LibTorch) and scripts/current_torch_stage.sh
# (the test suite's LibTorch 2.15 stage): one venv, one requirements file, so a newcomer who runs
# main.sh and then test.sh downloads it once. Source it from the repository root.
#
#   torch_venv_nvcc            prints the nvcc the wheel's CMake config will use ($CUDACXX, nvcc on
#                              PATH, /usr/local/cuda/bin/nvcc), or fails
#   torch_venv_nvcc_version N  prints nvcc N's release ("13.0")
#   torch_venv_open            makes $TORCH_VENV if it is missing or was made from another
#                              requirements file, then holds a shared lock on it (fd 8) until the
#                              calling process ends, so that no other run remakes it meanwhile;
#                              sets TORCH_ROOT (the torch package's folder: CMAKE_PREFIX_PATH),
#                              TORCH_WHEEL_VERSION (torch.__version__), TORCH_WHEEL_CUDA (its CUDA)
#                              and TORCH_WHEEL_GPU (1 when torch sees a GPU, else 0). Fails,
#                              leaving no half-made venv, when pip does (no network, no PyPI).
#
# The download: about 3.0 GB of wheels (torch 0.54 GB, the nvidia-* CUDA libraries 2.2 GB, triton
# 0.29 GB; measured 2026-12-08), 5.4 GB once installed (README's Quick start).
TORCH_VENV=${MIXPREC_TORCH_VENV:-/var/cache/mixprec/torch-current-venv}
TORCH_VENV_REQUIREMENTS=scripts/lib/current_torch.txt

torch_venv_nvcc() {
  local nvcc=${CUDACXX:-$(command -v nvcc || true)}
  [[ -n $nvcc ]] || nvcc=/usr/local/cuda/bin/nvcc
  [[ -x $nvcc ]] || return 1
  echo "$nvcc"
}

torch_venv_nvcc_version() {
  "$1" --version | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p'
}

# torch_venv_make: (under the exclusive lock) the venv from scratch; removes it again on failure.
torch_venv_make() {
  local python=/usr/bin/python3  # Debian's (torch 2.15 needs Python >= 3.11: Debian 12 has 3.11)
  [[ -x $python ]] || python=$(command -v python3)
  echo "== making $TORCH_VENV from $TORCH_VENV_REQUIREMENTS: about 3.0 GB from PyPI, 5.4 GB" \
    "installed (once: scripts/test.sh uses the same venv)"
  rm -rf "$TORCH_VENV"
  if "$python" -m venv "$TORCH_VENV" &&
    "$TORCH_VENV/bin/python" -m pip install -q --disable-pip-version-check \
      -r "$TORCH_VENV_REQUIREMENTS" &&
    cp "$TORCH_VENV_REQUIREMENTS" "$TORCH_VENV/mixprec-requirements.txt"; then
    return 0
  fi
  rm -rf "$TORCH_VENV"
  return 1
}

torch_venv_open() {
  local info
  mkdir -p "$(dirname "$TORCH_VENV")" || return 1
  exec 8>"$TORCH_VENV.lock" || return 1
  # Shared while in use (main.sh run inside the current-PyTorch stage takes it again beside the
  # stage's), exclusive while making; flock converts a held lock (not atomically: hence the loop).
  while true; do
    flock -s 8
    cmp -s "$TORCH_VENV_REQUIREMENTS" "$TORCH_VENV/mixprec-requirements.txt" && break
    flock -x 8
    if ! cmp -s "$TORCH_VENV_REQUIREMENTS" "$TORCH_VENV/mixprec-requirements.txt" &&
      ! torch_venv_make; then
      flock -u 8
      return 1
    fi
  done
  info=$("$TORCH_VENV/bin/python" -c 'import os, torch
print(os.path.dirname(torch.__file__), torch.__version__, torch.version.cuda,
      int(torch.cuda.is_available()))') || return 1
  read -r TORCH_ROOT TORCH_WHEEL_VERSION TORCH_WHEEL_CUDA TORCH_WHEEL_GPU <<<"$info"
  export TORCH_ROOT TORCH_WHEEL_VERSION TORCH_WHEEL_CUDA TORCH_WHEEL_GPU
}
