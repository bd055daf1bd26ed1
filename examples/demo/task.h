// The demo's training data: an embedded regression task generated from a seed (no download), or a
// user's CSV file (numeric columns, the last one the target).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace mixprec_demo {

/// Inputs `x` (samples x features, float32) and targets `y` (samples x 1, float32).
struct Dataset {
  torch::Tensor x;
  torch::Tensor y;
  /// sqrt(mean(y^2)): the unit the model predicts in (its output multiplier).
  double target_rms = 1;
  /// One line for the report, e.g. "embedded task: 4096 samples, 8 features, ...".
  std::string description;
};

/// RMS of the embedded task's targets. Small on purpose (a quantity in small units): the MSE
/// gradient is proportional to the residual, so as the fit improves it falls below fp16's range.
inline constexpr double kDefaultTargetRms = 3e-3;

/// The embedded task: y = target_rms * teacher(x) for a fixed random tanh network `teacher`
/// (its output normalized to zero mean, unit variance) and x ~ N(0, 1), all drawn from `seed`;
/// the same arguments give the same data.
Dataset make_default_task(std::uint64_t seed, double target_rms = kDefaultTargetRms,
                          std::int64_t samples = 4096, std::int64_t features = 8);

/// Reads a CSV file of numbers separated by commas: every column but the last is a feature
/// (standardized to zero mean, unit variance), the last is the target (kept as it is: its scale
/// is what sets the gradients' scale). A first line that is not numeric is taken as a header.
/// Throws std::runtime_error naming the file, line and column of the first problem.
Dataset load_csv(const std::string& path);

}  // namespace mixprec_demo
