#!/usr/bin/env bash
# The main job: installs missing packages, builds mixprec, runs the seed page's four examples
# and then the demo of what loss scaling buys (table, demo_out/log.csv, demo_out/plot.png).
# Usage: scripts/main.sh [demo flags, e.g. --steps 3000]   (build folder: build/, or $MIXPREC_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${MIXPREC_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
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
