// Internal bridge from LibTorch tensors to the core's views (the tiny-cuda-nn cpp_api split):
// the only place that knows both at::Tensor and core::TensorView.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "mixprec/core/scale_policy.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::detail {

/// The core dtype of a floating tensor; throws c10::Error naming `who` for other dtypes.
core::DType to_core_dtype(c10::ScalarType type, const char* who);

/// The core device of a tensor; throws for devices other than CPU and CUDA.
core::Device to_core_device(const c10::Device& device, const char* who);

/// A view over a non-overlapping, dense tensor's memory (any stride order).
core::TensorView to_view(const at::Tensor& t, const char* who);

/// Calls `launch(stream)` for kernels on `device`: for CUDA under a device guard with
/// LibTorch's current stream (a cudaStream_t), so the work is ordered with the user's and
/// nothing waits for the device; for the CPU with nullptr. Throws for CUDA tensors when mixprec
/// was built without a CUDA LibTorch.
void on_device(const c10::Device& device, const std::function<void(void*)>& launch);

/// update_scale_ with the full policy and, when defined, the telemetry counters (int64,
/// core::kNumCounters) and history (double, rows x 3) on the scale's device.
void update_scale_state_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                         const core::ScalePolicy& policy, at::Tensor* counters,
                         at::Tensor* history);

/// The elements of a tensor, read to the host (a device sync for CUDA tensors).
template <typename T>
std::vector<T> to_host_vector(const at::Tensor& t) {
  const at::Tensor host = t.cpu().contiguous();
  const T* data = host.data_ptr<T>();
  return std::vector<T>(data, data + host.numel());
}

}  // namespace mixprec::detail
