#!/usr/bin/env bash
# The main job: installs missing packages, builds mixprec and runs its examples.
# Usage: scripts/main.sh   (build folder: build/, or $MIXPREC_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${MIXPREC_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)"
for example in seed_example_1 seed_example_2 seed_example_3 seed_example_4 raw_loss_scaler; do
  echo "== $example"
  "$BUILD_DIR/examples/$example"
done
