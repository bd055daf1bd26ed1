// mixprec::optim::Adam: torch::optim::Adam with its update fused into one pass over each
// parameter's memory, and GradScaler's unscale and skip-on-inf folded into that pass.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/adam.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <vector>

#include "mixprec/amp_optimizer.h"

namespace mixprec::optim {

/// Adam with LibTorch 1.13's torch::optim::Adam formulas (results agree with it to a few ulps, not
/// bit for bit: LibTorch's addcdiv_ groups the last product and quotient differently; L2 weight
/// decay added to the gradient, amsgrad), options, param groups, state (AdamParamState) and
/// serialization, computed by one fused kernel per step (CPU or CUDA). As a
/// mixprec::SupportsAmpScaling optimizer, GradScaler::step() hands it the scale and found_inf: the
/// kernel unscales each gradient (writing it back), and a non-zero found_inf leaves parameters,
/// gradients, moments and step counts untouched.
///
/// **Example**
/// ```cpp
/// mixprec::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
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
/// On the CPU, state is created when a parameter is first updated (a skipped first step
/// creates none).
class Adam : public torch::optim::Optimizer, public SupportsAmpScaling {
 public:
  /// Same validation and messages as torch::optim::Adam.
  explicit Adam(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                torch::optim::AdamOptions defaults = {});
  /// One param group holding `params`.
  explicit Adam(std::vector<at::Tensor> params, torch::optim::AdamOptions defaults = {});

  /// One step over every parameter that has a gradient; returns the closure's loss (or an
  /// undefined tensor), as torch::optim::Adam::step.
  at::Tensor step(LossClosure closure = nullptr) override;
  /// Writes param groups and state in torch::optim::Adam's format.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads what save() (or torch::optim::Adam::save) wrote.
  void load(torch::serialize::InputArchive& archive) override;
};

namespace detail {

/// Internal: the fused step shared by Adam (`decoupled` false) and AdamW (true) over
/// `optimizer`'s param groups and state. Instantiated for (AdamParamState, AdamOptions) and
/// (AdamWParamState, AdamWOptions) in src/torch/optim/adam.cpp.
template <typename ParamState, typename Options>
void fused_adam_step(torch::optim::Optimizer& optimizer, const SupportsAmpScaling& amp,
                     bool decoupled, const char* who);

/// Internal: torch::optim::Adam's option checks, shared with AdamW (LibTorch's messages).
void check_adam_options(double lr, double eps, double beta1, double beta2, double weight_decay);

}  // namespace detail
}  // namespace mixprec::optim
