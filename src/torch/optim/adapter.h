// Internal helpers shared by the fused LibTorch optimizers (src/torch/optim/*.cpp): reading
// GradScaler's grad_scale/found_inf on the host, and describing a parameter, its gradient and its
// state to the core kernels as views whose element i belongs to the same parameter element.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <utility>
#include <vector>

#include "mixprec/amp_optimizer.h"
#include "mixprec/core/error.h"
#include "torch/views.h"

namespace mixprec::optim::detail {

/// GradScaler's two tensors as host floats (the CPU kernels read them through pointers).
class AmpScalars {
 public:
  AmpScalars(const SupportsAmpScaling& amp, const char* who)
      : grad_scale_(host_float(amp.grad_scale, "grad_scale", who)),
        found_inf_(host_float(amp.found_inf, "found_inf", who)) {}

  /// Null when the optimizer's grad_scale is undefined (grads are not scaled).
  const float* grad_scale() const { return ptr(grad_scale_); }
  /// Null when the optimizer's found_inf is undefined (never skip).
  const float* found_inf() const { return ptr(found_inf_); }

 private:
  static at::Tensor host_float(const at::Tensor& t, const char* name, const char* who) {
    if (!t.defined()) return {};
    TORCH_CHECK(t.numel() == 1, who, ": ", name, " must be a 1-element tensor, got ", t.numel(),
                " elements.");
    // On the CPU this is the tensor itself: the kernel reads the value GradScaler wrote.
    return t.to(at::kCPU, at::kFloat).contiguous();
  }
  static const float* ptr(const at::Tensor& t) {
    return t.defined() ? t.data_ptr<float>() : nullptr;
  }

  at::Tensor grad_scale_;
  at::Tensor found_inf_;
};

/// Views over tensors of one parameter (the parameter first) whose element i matches across
/// them. Tensors already sharing the parameter's dense layout are viewed in place; otherwise
/// every non-contiguous one goes through a contiguous copy that write_back() copies back.
class ElementwiseViews {
 public:
  /// Views of `tensors`, in order; all must have the sizes of tensors[0].
  std::vector<core::TensorView> add(const std::vector<at::Tensor>& tensors, const char* who) {
    const at::Tensor& param = tensors.front();
    bool same_layout = param.is_non_overlapping_and_dense();
    for (const at::Tensor& t : tensors) {
      TORCH_CHECK(t.sizes() == param.sizes(), who, ": a gradient or state tensor has sizes ",
                  t.sizes(), " but its parameter has ", param.sizes());
      same_layout = same_layout && t.is_non_overlapping_and_dense() &&
                    (t.numel() <= 1 || t.strides() == param.strides());
    }
    std::vector<core::TensorView> views;
    views.reserve(tensors.size());
    for (const at::Tensor& t : tensors) {
      if (same_layout || t.is_contiguous()) {
        views.push_back(mixprec::detail::to_view(t, who));
      } else {
        staged_.emplace_back(t, t.contiguous());
        views.push_back(mixprec::detail::to_view(staged_.back().second, who));
      }
    }
    return views;
  }

  /// Copies the staged buffers back into their tensors (call after an applied step).
  void write_back() {
    c10::NoGradGuard no_grad;
    for (auto& [original, dense] : staged_) original.copy_(dense);
    staged_.clear();
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> staged_;
};

/// The key LibTorch 1.13 files a parameter's state under in Optimizer::state().
inline std::string state_key(const at::Tensor& param) {
  return c10::guts::to_string(param.unsafeGetTensorImpl());
}

/// Runs the closure with gradients enabled, as LibTorch's step(); an undefined tensor if none.
inline at::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

/// Calls `kernel()`, turning a core::Error into a c10::Error that names `who`.
template <typename Kernel>
bool call_kernel(const char* who, const Kernel& kernel) {
  try {
    return kernel();
  } catch (const core::Error& e) {
    TORCH_CHECK(false, who, ": ", e.what());
  }
  return false;  // unreachable
}

}  // namespace mixprec::optim::detail
