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
};

/// One run: its name, its steps and the numbers of the table.
struct RunResult {
  std::string name;  ///< "fp32", "fp16 no scaling", "fp16 + GradScaler"
  std::string key;   ///< the CSV name: fp32, fp16, fp16_scaled
  std::vector<StepRecord> steps;
  double final_loss = 0;  ///< MSE of the final weights over all samples, in fp32
  std::int64_t skipped_steps = 0;
  double final_scale = 1;
  bool flush_measured = false;        ///< false for fp32 (nothing is rounded) and on CUDA
  std::int64_t nonzero_grads = 0;     ///< gradient elements non-zero in fp32, over all steps
  std::int64_t flushed_grads = 0;     ///< of those, elements fp16 rounding turned into zero
  std::int64_t overflowed_grads = 0;  ///< of those, elements fp16 rounding turned into inf
  double seconds = 0;

  /// flushed_grads / nonzero_grads (0 when nothing was measured).
  double flushed_share() const {
    return nonzero_grads == 0 ? 0.0 : double(flushed_grads) / double(nonzero_grads);
  }
};

}  // namespace mixprec_demo
