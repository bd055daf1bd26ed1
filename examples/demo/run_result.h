// What one training run of the demo recorded: a row per step and the totals of the table. Plain
// data without LibTorch, shared by the trainer and the report writers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixprec_demo {

/// One optimizer step of one run.
struct StepRecord {
  std::int64_t step = 0;     ///< 1-based
  double loss = 0;           ///< the minibatch loss (unscaled), as the run computed it
  double scale = 1;          ///< the GradScaler's scale after update(); 1 without a scaler
  bool skipped = false;      ///< the scaler skipped optimizer.step() (inf/NaN gradients)
  double flushed_share = 0;  ///< of this step's non-zero gradient elements, share fp16 zeroed
  /// FP8 runs: the scale linear0's grad_output was multiplied by before its FP8 cast in this
  /// step's backward (delayed, current: the layer's one scale; MXFP8: the smallest and largest of
  /// its blocks' scales, 2^(127 - e) for E8M0 exponent e; no scaling: 1). 0 elsewhere.
  double fp8_grad_scale_min = 0;
  double fp8_grad_scale_max = 0;  ///< see fp8_grad_scale_min
  /// The total gradient norm before clipping (unscaled); NaN when clipping is off, inf/NaN on a
  /// step the scaler skipped.
  double grad_norm = 0;
};

/// One run: its name, its steps and the numbers of the table.
struct RunResult {
  /// "fp32", "fp16 no scaling", "fp16 + GradScaler", "bf16", "fp8 no scaling", "fp8 delayed",
  /// "fp8 current", "fp8 MXFP8", "fp8 rowwise", "fp8 blockwise"
  std::string name;
  /// the CSV name: fp32, fp16, fp16_scaled, bf16, fp8_none, fp8_delayed, fp8_current, fp8_mxfp8,
  /// fp8_rowwise, fp8_blockwise
  std::string key;
  bool fp8 = false;  ///< an fp8::Linear run: its steps carry fp8_grad_scale_*
  std::vector<StepRecord> steps;
  double final_loss = 0;  ///< MSE of the final weights over all samples, in fp32
  std::int64_t skipped_steps = 0;
  double final_scale = 1;
  /// false for fp32 (nothing is rounded), bf16 and real fp16 (no fp32 copy of the gradients)
  bool flush_measured = false;
  std::int64_t nonzero_grads = 0;     ///< gradient elements non-zero in fp32, over all steps
  std::int64_t flushed_grads = 0;     ///< of those, elements fp16 (fp8) rounding turned into zero
  std::int64_t overflowed_grads = 0;  ///< of those, elements fp16 rounding turned into inf
  double seconds = 0;
  /// The median of the steps' grad_norm over the steps that were not skipped (NaN: no clipping).
  double median_grad_norm = 0;
  std::int64_t clipped_steps = 0;  ///< steps whose grad_norm exceeded max_norm

  /// flushed_grads / nonzero_grads (0 when nothing was measured).
  double flushed_share() const {
    return nonzero_grads == 0 ? 0.0 : double(flushed_grads) / double(nonzero_grads);
  }
};

}  // namespace mixprec_demo
