// The contract between GradScaler and optimizers that unscale, check and skip by themselves
// (PyTorch's `_step_supports_amp_scaling` with the `grad_scale` / `found_inf` attributes).
#pragma once

#include <ATen/core/Tensor.h>

namespace mixprec {

/// Mix-in for a torch::optim::Optimizer subclass whose step() does the unscaling itself.
/// GradScaler::step() recognises it (dynamic_cast), does not read found_inf to the host, and
/// instead sets the two tensors below right before calling step() and clears them after:
/// - `grad_scale`: divide every gradient by it before use (and write the quotient back into the
///   gradient). Undefined when the gradients were already unscaled by GradScaler::unscale_().
///   A value the user set beforehand is multiplied into the scaler's scale, as in PyTorch.
/// - `found_inf`: a float32 tensor on the scale's device; when it is non-zero, step() must leave
///   parameters, gradients and optimizer state (step counters included) untouched. mixprec
///   passes 0 or 1, never a sum over devices (see Note [found_inf is 0 or 1]).
/// - `clip_coef`: after GradScaler::clip_grad_norm_, the clip coefficient to apply in the same
///   pass (the gradients are then still scaled: grad_scale is set too).
/// Neither is a host value, so the whole step stays free of device synchronisation.
class SupportsAmpScaling {
 public:
  virtual ~SupportsAmpScaling() = default;

  at::Tensor grad_scale;  ///< divide gradients by this (undefined: already unscaled)
  at::Tensor found_inf;   ///< non-zero: skip the whole step
  /// Set by GradScaler::clip_grad_norm_: a float32 1-element tensor, the clip coefficient. Each
  /// gradient becomes fl(fl(g * (1 / grad_scale)) * clip_coef), written back, before the update
  /// uses it (undefined: no clip).
  at::Tensor clip_coef;
};

}  // namespace mixprec
