// mixprec::optim::SGD: torch::optim::SGD with its update fused into one pass over each
// parameter's memory, and GradScaler's unscale and skip-on-inf folded into that pass.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <vector>

#include "mixprec/amp_optimizer.h"

namespace mixprec::optim {

/// Stochastic gradient descent with LibTorch 1.13's torch::optim::SGD math (momentum,
/// dampening, Nesterov, weight decay), options, param groups, state (SGDParamState) and
/// serialization, computed by one fused kernel per step (CPU or CUDA). As a
/// mixprec::SupportsAmpScaling optimizer, GradScaler::step() hands it the scale and found_inf
/// instead of unscaling and reading found_inf to the host: the kernel unscales each gradient
/// (writing it back), and a non-zero found_inf leaves parameters, gradients and momentum buffers
/// untouched.
///
/// **Example**
/// ```cpp
/// mixprec::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
/// mixprec::GradScaler scaler;
/// scaler.scale(loss).backward();
/// scaler.step(opt);  // unscale, check and update in one pass
/// scaler.update();
/// ```
///
/// Parameters must be floating tensors with dense gradients, on the CPU or on CUDA devices (each
/// device gets its own kernel calls): float32 or float64 anywhere, float16 or bfloat16 on the CPU
/// (state in the parameter's dtype, math in float, each value rounded once when stored, as
/// PyTorch's fused CPU optimizers); others throw. On CUDA nothing waits for the
/// device: the kernels read found_inf and the scale there and keep each parameter's step count
/// as a device tensor in its state, so a whole iteration can be captured in a CUDA graph; the
/// state is then made on the first step even if that step is skipped (see docs/design.md).
class SGD : public torch::optim::Optimizer, public SupportsAmpScaling {
 public:
  /// Same validation and messages as torch::optim::SGD.
  explicit SGD(std::vector<torch::optim::OptimizerParamGroup> param_groups,
               torch::optim::SGDOptions defaults);
  /// One param group holding `params`.
  explicit SGD(std::vector<at::Tensor> params, torch::optim::SGDOptions defaults);

  /// One step over every parameter that has a gradient; returns the closure's loss (or an
  /// undefined tensor), as torch::optim::SGD::step.
  at::Tensor step(LossClosure closure = nullptr) override;
  /// Writes param groups and state in torch::optim::SGD's format.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads what save() (or torch::optim::SGD::save) wrote.
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace mixprec::optim
