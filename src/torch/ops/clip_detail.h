// What mixprec::clip_grad_norm_ (clip.cpp) and GradScaler::clip_grad_norm_
// (src/torch/scaler/grad_scaler_clip.cpp) share: the norm of a grad list with the inf check, the
// coefficient, and the unscale-and-clip multiply, each over devices in first-seen order.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <utility>
#include <vector>

namespace mixprec::detail {

/// The norm of a grad list (norm_type 2 or inf: core::grad_norm_; others per tensor in double).
struct GradNorm {
  /// 0-dim float32 on the first grad's device (CPU when there is none): the total norm.
  at::Tensor norm;
  /// 0-dim float64 beside it: the sum of u^2 (p = 2), max |u| (inf), or sum |u|^p before the
  /// root (others); what a process group reduces before the root.
  at::Tensor power;
  /// Per device (first-seen order), when asked: 0 or 1, whether a grad as stored held inf/NaN.
  std::vector<std::pair<c10::Device, at::Tensor>> found_inf;
};

/// Whether norm_type takes the one-read path (2 or inf).
bool fast_norm_type(double norm_type);

/// The norm of u = grad * inv_scale (unscale_'s product; inv_scale undefined: the grads as they
/// are) over the defined `grads`. norm_type other than 2/inf needs an undefined inv_scale.
/// `check_inf`: also fill found_inf (fast path only), one float32 per device, in the same read.
GradNorm grad_norm(const std::vector<at::Tensor>& grads, double norm_type,
                   const at::Tensor& inv_scale, bool check_inf);

/// The norm from a power: sqrt (p = 2), itself (inf), or power^(1/p), as float32.
at::Tensor norm_from_power(const at::Tensor& power, double norm_type);

/// Python's clamp(max_norm / (total_norm + 1e-6), max=1.0) on total_norm's device, float32.
at::Tensor clip_coefficient(double max_norm, const at::Tensor& total_norm);

/// Every defined grad becomes fl(fl(grad * inv_scale) * coef) (core::unscale_and_clip_);
/// inv_scale undefined: only the clip.
void unscale_and_clip(const std::vector<at::Tensor>& grads, const at::Tensor& inv_scale,
                      const at::Tensor& coef);

/// PyTorch's text for a non-finite norm with error_if_nonfinite.
[[noreturn]] void throw_nonfinite_norm(double norm_type);

}  // namespace mixprec::detail
