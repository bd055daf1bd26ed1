// One training run of the demo: fp32, fp16 without loss scaling, fp16 with mixprec::GradScaler,
// bf16, or FP8 with one of mixprec::fp8's recipes, with the same data, initial weights and batch
// order, so the runs differ only in precision.
#pragma once

#include <cstdint>

#include "run_result.h"
#include "task.h"

namespace mixprec_demo {

/// The runs the demo compares. The FP8 ones need LibTorch >= 2.1 (fp8_run_supported()).
enum class RunKind {
  kFp32,
  kFp16,
  kFp16Scaled,
  kBf16,          ///< real bf16 under mixprec::AutocastGuard(device, kBFloat16): FP8's reference
  kFp8None,       ///< fp8::Linear, fp8::Scaling::kNone (every scale 1)
  kFp8Delayed,    ///< fp8::Scaling::kDelayed (TE DelayedScaling defaults)
  kFp8Current,    ///< fp8::Scaling::kCurrent (torchao tensorwise)
  kFp8Mxfp8,      ///< fp8::Scaling::kMxfp8 (E8M0 scale per block of 32)
  kFp8Rowwise,    ///< fp8::Scaling::kRowwise (torchao ROWWISE: a scale per row of each operand)
  kFp8Blockwise,  ///< fp8::Scaling::kBlockwise (TE Float8BlockScaling: 1x128 / 128x128 tiles)
  kFp4Nvfp4,      ///< fp8::Scaling::kNvfp4 (TE NVFP4BlockScaling: E2M1, E4M3 scales per 16)
  kFp4Mxfp4,      ///< fp8::Scaling::kMxfp4 (torchao MXFP4: E2M1, E8M0 scales per 32)
};

/// Whether this build can train the FP8 runs (LibTorch >= 2.1: float8 dtypes, mixprec/fp8.h).
bool fp8_run_supported();

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
  /// Every run clips its gradients to this total norm, as PyTorch's AMP recipe does
  /// (GradScaler::clip_grad_norm_: unscale_ + clip_grad_norm_); 0: no clipping.
  double max_norm = 1.0;
};

/// Trains a fresh model (weights drawn from config.seed) on `data` and records every step.
/// Prints a progress line to stderr when the run takes more than a couple of seconds.
/// Throws std::invalid_argument for an FP8 kind when !fp8_run_supported().
RunResult train(const Dataset& data, RunKind kind, const TrainConfig& config);

}  // namespace mixprec_demo
