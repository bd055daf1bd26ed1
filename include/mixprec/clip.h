// Gradient clipping: Python's torch.nn.utils.clip_grad_norm_ and its halves for LibTorch, with no
// host sync, a norm accurate to fp64, and one read of the grads for the norm and one read-write for
// the clip. The AMP version that also unscales is GradScaler::clip_grad_norm_ (grad_scaler.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace mixprec {

/// As Python 2.15's `torch.nn.utils.get_total_norm(tensors, norm_type, error_if_nonfinite)`: the
/// norm of the tensors taken as one vector, a 0-dim float32 tensor on the first tensor's device.
/// - norm_type 2 and inf read each tensor once (core::grad_norm_): squares are summed in double
///   in an order that does not depend on the thread count, so the norm is within 1e-6 (relative)
///   of an fp64 reference also for 64M fp32 elements, and fp16/bf16 tensors do not overflow
///   (PyTorch takes each tensor's norm in its own dtype: docs/python_to_cpp.md). Other norm_type
///   (0, 1, 3, -inf, ...): each tensor's norm in double, then the norm of those, as PyTorch.
/// - NaN gives NaN; an inf gives inf. Undefined tensors are skipped; no tensor gives tensor(0.).
/// - error_if_nonfinite: reads the norm to the host (a sync) and throws PyTorch's RuntimeError
///   text "The total norm of order 2.0 for gradients from `parameters` is non-finite, ...".
/// Throws for integer or sparse tensors and for devices other than CPU and CUDA.
at::Tensor get_total_norm(const std::vector<at::Tensor>& tensors, double norm_type = 2.0,
                          bool error_if_nonfinite = false);

/// As Python's `torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)`: every
/// defined grad of `parameters` becomes grad * clamp(max_norm / (total_norm + 1e-6), max=1),
/// with the coefficient computed as Python computes it (reciprocal, then times max_norm: two
/// float32 roundings; NaN propagates) and the multiply done in float32 (fp16/bf16 grads rounded
/// once, fp64 in double) whatever the coefficient, with no host sync. max_norm is not validated
/// (0 zeroes the grads, as in PyTorch). `total_norm` is a 1-element float tensor.
void clip_grads_with_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                           const at::Tensor& total_norm);

/// As Python's `torch.nn.utils.clip_grad_norm_`: get_total_norm of the parameters' grads, then
/// clip_grads_with_norm_. Returns the total norm before clipping (0-dim float32, on the grads'
/// device, no host sync unless error_if_nonfinite). One read of the grads, then one read-write.
///
/// **Example**
/// ```cpp
/// loss.backward();
/// at::Tensor norm = mixprec::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);
/// optimizer.step();
/// ```
at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                           double norm_type = 2.0, bool error_if_nonfinite = false);

/// As Python's `torch.nn.utils.clip_grad_value_`: clamps every defined grad in place to
/// [-clip_value, clip_value] (clamp_min_ then clamp_max_: NaN stays NaN, +-inf becomes
/// +-clip_value).
void clip_grad_value_(const std::vector<at::Tensor>& parameters, double clip_value);

}  // namespace mixprec
