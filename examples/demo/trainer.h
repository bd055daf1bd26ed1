// One training run of the demo: fp32, fp16 without loss scaling, or fp16 with mixprec::GradScaler,
// with the same data, initial weights and batch order, so the runs differ only in precision.
#pragma once

#include <cstdint>

#include "run_result.h"
#include "task.h"

namespace mixprec_demo {

/// The three runs the demo compares.
enum class RunKind { kFp32, kFp16, kFp16Scaled };

/// Settings shared by all runs.
struct TrainConfig {
  std::int64_t steps = 1000;
  std::int64_t hidden = 32;
  std::int64_t batch = 256;
  double lr = 0.01;  ///< Adam's peak learning rate, decayed to 0 along a cosine
  std::uint64_t seed = 0;
  /// The model's fixed output multiplier: the scale of the targets (see MlpImpl).
  double output_scale = 1;
  double eps = 1e-8;  ///< Adam's eps
  bool cuda = false;  ///< train on CUDA (else on the CPU)
  /// fp16 runs: real fp16 under mixprec::AutocastGuard on the training device (CUDA, or the CPU
  /// with LibTorch >= 2.2), or fp16 emulated by rounding (see fp16_emulation.h).
  bool native_fp16 = false;
  /// The scaled run's GradScaler init_scale (PyTorch's default).
  double init_scale = 65536;
  /// The scaled run's GradScaler growth_interval. Shorter than PyTorch's 2000 so that a demo of
  /// 1000 steps shows the scale growing and backing off.
  std::int64_t growth_interval = 40;
};

/// Trains a fresh model (weights drawn from config.seed) on `data` and records every step.
/// Prints a progress line to stderr when the run takes more than a couple of seconds.
RunResult train(const Dataset& data, RunKind kind, const TrainConfig& config);

}  // namespace mixprec_demo
