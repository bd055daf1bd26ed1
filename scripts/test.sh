#!/usr/bin/env bash
# The whole test suite: installs missing packages, configures, builds and runs every test.
# Usage: scripts/test.sh   (build folder: build/, or $MIXPREC_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${MIXPREC_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
