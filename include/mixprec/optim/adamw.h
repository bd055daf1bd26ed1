// mixprec::optim::AdamW: torch::optim::AdamW with its update fused into one pass over each
// parameter's memory, and GradScaler's unscale and skip-on-inf folded into that pass.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <vector>

#include "mixprec/amp_optimizer.h"

namespace mixprec::optim {

/// AdamW with LibTorch 1.13's torch::optim::AdamW formulas (results agree with it to a few ulps,
/// not bit for bit: LibTorch's addcdiv_ groups the last product and quotient differently; decoupled
/// weight decay, amsgrad), options, param groups, state (AdamWParamState) and serialization,
/// computed by one fused kernel per step (CPU or CUDA). As a mixprec::SupportsAmpScaling optimizer,
/// GradScaler::step() hands it the scale and found_inf: the kernel unscales each gradient (writing
/// it back), and a non-zero found_inf leaves parameters, gradients, moments and step counts
/// untouched.
///
/// **Example**
/// ```cpp
/// mixprec::optim::AdamW opt(model->parameters(),
///                           torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
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
class AdamW : public torch::optim::Optimizer, public SupportsAmpScaling {
 public:
  /// Same validation and messages as torch::optim::AdamW.
  explicit AdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                 torch::optim::AdamWOptions defaults = {});
  /// One param group holding `params`.
  explicit AdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {});

  /// One step over every parameter that has a gradient; returns the closure's loss (or an
  /// undefined tensor), as torch::optim::AdamW::step.
  at::Tensor step(LossClosure closure = nullptr) override;
  /// Writes param groups and state in torch::optim::AdamW's format.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads what save() (or torch::optim::AdamW::save) wrote.
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace mixprec::optim
