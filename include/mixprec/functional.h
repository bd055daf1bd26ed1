// The two AMP kernels on LibTorch tensors (torch._amp_foreach_non_finite_check_and_unscale_ and
// torch._amp_update_scale_), routed to mixprec's core kernels, plus the gradient walk GradScaler
// uses. They work where LibTorch 1.13 has no CPU kernel for at::_amp_*.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace mixprec {

/// Multiplies every grad in place by inv_scale (nothing is written when inv_scale == 1), and sets
/// found_inf to 1.0 if any element is inf or NaN; never clears it. found_inf and inv_scale are
/// 1-element float32 tensors on the grads' device. Grads may mix fp32, fp64, fp16 and bf16 and
/// may be non-contiguous; all must be dense (strided) and on one device.
void non_finite_check_and_unscale_(at::TensorList grads, at::Tensor& found_inf,
                                   const at::Tensor& inv_scale);

/// In place, as torch._amp_update_scale_: on found_inf != 0 the scale is multiplied by
/// backoff_factor and the tracker reset; otherwise the tracker counts a clean step and every
/// growth_interval clean steps the scale grows by growth_factor (never to inf). scale: 1-element
/// float32; growth_tracker: 1-element int32; found_inf: 1-element float32; all on one device.
void update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                   double growth_factor, double backoff_factor, std::int64_t growth_interval);

/// GradScaler's gradient walk (PyTorch's GradScaler._unscale_grads_): every defined .grad of every
/// param group, grouped by device then dtype (first-seen order), one kernel call per group, with
/// a per-device copy of found_inf and inv_scale. Sparse grads: their values are processed (an fp16
/// sparse grad is coalesced first, replacing .grad). Returns the per-device found_inf copies.
/// Throws "Attempting to unscale FP16 gradients." for an fp16 grad unless allow_fp16.
std::vector<std::pair<c10::Device, at::Tensor>> unscale_grads_(torch::optim::Optimizer& optimizer,
                                                               const at::Tensor& inv_scale,
                                                               const at::Tensor& found_inf,
                                                               bool allow_fp16);

}  // namespace mixprec
