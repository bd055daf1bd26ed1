// Internal bridge from LibTorch tensors to the core's views (the tiny-cuda-nn cpp_api split):
// the only place that knows both at::Tensor and core::TensorView.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <utility>
#include <vector>

#include "mixprec/core/scale_policy.h"
#include "mixprec/core/tensor_view.h"

namespace torch::optim {
class Optimizer;
}

namespace mixprec::detail {

/// The core dtype of a floating tensor; throws c10::Error naming `who` for other dtypes.
core::DType to_core_dtype(c10::ScalarType type, const char* who);

/// The core device of a tensor; throws for devices other than CPU and CUDA.
core::Device to_core_device(const c10::Device& device, const char* who);

/// A view over a non-overlapping, dense tensor's memory (any stride order).
core::TensorView to_view(const at::Tensor& t, const char* who);

/// Whether this mixprec sends CUDA tensors to its CUDA kernels (built with MIXPREC_WITH_CUDA
/// against a CUDA LibTorch).
bool torch_cuda_built();

/// Throws, saying how to get CUDA support, for CUDA tensors in a mixprec built without it; and
/// for devices other than CPU and CUDA.
void check_kernel_device(const c10::Device& device);

/// Calls `launch(stream)` for kernels on `device`: for CUDA under a device guard with
/// LibTorch's current stream (a cudaStream_t), so the work is ordered with the user's and
/// nothing waits for the device; for the CPU with nullptr. Throws for CUDA tensors when mixprec
/// was built without a CUDA LibTorch. A core::Error from `launch` leaves as a c10::Error with the
/// same message.
void on_device(const c10::Device& device, const std::function<void(void*)>& launch);

/// update_scale_ with the full policy and, when defined, the telemetry counters (int64,
/// core::kNumCounters) and history (double, rows x 3) on the scale's device.
void update_scale_state_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                         const core::ScalePolicy& policy, at::Tensor* counters,
                         at::Tensor* history);

/// `t` on `device` (a copy when `copy` or when the device differs). Non-blocking only towards a
/// CUDA device, where the copy is ordered on the stream with the kernels that read it: a
/// non-blocking copy from CUDA to the CPU lands later, so the CPU kernels would read a stale
/// value, or their result be overwritten by the late copy (Note [Copies between devices wait
/// when they land on the CPU] in src/torch/ops/functional.cpp).
inline at::Tensor to_device(const at::Tensor& t, const c10::Device& device, bool copy = false) {
  return t.to(device, /*non_blocking=*/device.is_cuda(), copy);
}

/// Marks `t` as changed in place, as a LibTorch in-place op does (the kernels write through raw
/// pointers, which LibTorch cannot see): autograd then refuses a saved tensor that was changed
/// instead of computing with its new value. Inference tensors have no version to bump.
inline void bump_version(const at::Tensor& t) {
  if (t.defined() && !t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

/// unscale_grads_ (include/mixprec/functional.h); with own_found_inf the caller hands over
/// found_inf (a fresh tensor nobody else holds), which then serves its own device uncopied.
std::vector<std::pair<c10::Device, at::Tensor>> unscale_grads_(
    torch::optim::Optimizer& optimizer, const at::Tensor& inv_scale, const at::Tensor& found_inf,
    bool allow_fp16, bool own_found_inf);

/// The tensor GradScaler unscales for a gradient: the gradient itself, or a sparse one's values
/// (an fp16 sparse gradient is coalesced first, replacing `grad`). Throws "Attempting to unscale
/// FP16 gradients." for an fp16 gradient unless allow_fp16.
at::Tensor grad_to_unscale(at::Tensor& grad, bool allow_fp16);

/// unscale_grads_'s kernel calls over tensors from grad_to_unscale: grouped by device, then
/// dtype (first-seen order), one call per group, with a per-device found_inf copy.
std::vector<std::pair<c10::Device, at::Tensor>> unscale_grad_list_(
    const std::vector<at::Tensor>& grads, const at::Tensor& inv_scale,
    const at::Tensor& found_inf, bool own_found_inf);

/// The elements of a tensor, read to the host (a device sync for CUDA tensors).
template <typename T>
std::vector<T> to_host_vector(const at::Tensor& t) {
  const at::Tensor host = t.cpu().contiguous();
  const T* data = host.data_ptr<T>();
  return std::vector<T>(data, data + host.numel());
}

}  // namespace mixprec::detail
