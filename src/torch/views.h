// Internal bridge from LibTorch tensors to the core's views (the tiny-cuda-nn cpp_api split):
// the only place that knows both at::Tensor and core::TensorView.
#pragma once

#include <ATen/core/Tensor.h>

#include "mixprec/core/tensor_view.h"

namespace mixprec::detail {

/// The core dtype of a floating tensor; throws c10::Error naming `who` for other dtypes.
core::DType to_core_dtype(c10::ScalarType type, const char* who);

/// The core device of a tensor; throws for devices other than CPU and CUDA.
core::Device to_core_device(const c10::Device& device, const char* who);

/// A view over a non-overlapping, dense tensor's memory (any stride order).
core::TensorView to_view(const at::Tensor& t, const char* who);

}  // namespace mixprec::detail
