// The functional AMP ops on LibTorch tensors (include/mixprec/functional.h): argument checks in
// PyTorch's words, then the core kernels through core/kernels.h — no per-element LibTorch ops.
#include "mixprec/functional.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/core/kernels.h"
#include "torch/views.h"

#ifdef MIXPREC_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mixprec {
namespace detail {

core::DType to_core_dtype(c10::ScalarType type, const char* who) {
  switch (type) {
    case at::kFloat:
      return core::DType::kFloat32;
    case at::kDouble:
      return core::DType::kFloat64;
    case at::kHalf:
      return core::DType::kFloat16;
    case at::kBFloat16:
      return core::DType::kBFloat16;
    default:
      TORCH_CHECK(false, who, ": expected a float32, float64, float16 or bfloat16 tensor, got ",
                  type);
  }
  return core::DType::kFloat32;  // unreachable
}

core::Device to_core_device(const c10::Device& device, const char* who) {
  TORCH_CHECK(device.is_cpu() || device.is_cuda(), who,
              ": only CPU and CUDA tensors are supported, got a tensor on ", device);
  return {device.is_cpu() ? core::DeviceType::kCPU : core::DeviceType::kCUDA,
          device.is_cpu() ? -1 : static_cast<int>(device.index())};
}

core::TensorView to_view(const at::Tensor& t, const char* who) {
  TORCH_INTERNAL_ASSERT(t.numel() == 0 || t.is_non_overlapping_and_dense(), who,
                        ": a view needs a dense tensor");
  // dtype and device first: their messages (docs/errors.md) must not depend on what data_ptr()
  // of a tensor on another device (meta, ...) does in a given LibTorch.
  const core::DType dtype = to_core_dtype(t.scalar_type(), who);
  const core::Device device = to_core_device(t.device(), who);
  // A dense tensor covers exactly numel elements from its lowest address, which is data_ptr()
  // because LibTorch strides are never negative.
  return {t.numel() == 0 ? nullptr : t.data_ptr(), t.numel(), dtype, device};
}

bool torch_cuda_built() {
#ifdef MIXPREC_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

void check_kernel_device(const c10::Device& device) {
  TORCH_CHECK(!device.is_cuda() || torch_cuda_built(), "mixprec: got tensors on ", device,
              ", but this mixprec was built without CUDA. Build it against a CUDA LibTorch with "
              "nvcc installed: MIXPREC_WITH_CUDA then defaults to ON (docs/install.md)");
  TORCH_CHECK(device.is_cpu() || device.is_cuda(), "mixprec: got tensors on ", device,
              "; only CPU and CUDA tensors are supported");
}

void on_device(const c10::Device& device, const std::function<void(void*)>& launch) {
  // Every kernel call of the LibTorch adapter passes here: the core's errors leave as c10::Error,
  // the type the README promises, with the core's message.
  try {
#ifdef MIXPREC_TORCH_CUDA
    if (device.is_cuda()) {
      const c10::cuda::CUDAGuard guard(device);
      launch(static_cast<void*>(c10::cuda::getCurrentCUDAStream(device.index()).stream()));
      return;
    }
#endif
    check_kernel_device(device);
    launch(nullptr);
  } catch (const core::Error& e) {
    TORCH_CHECK(false, e.what());
  }
}

namespace {

void check_scalar_tensor(const at::Tensor& t, const char* name, c10::ScalarType dtype,
                         const char* dtype_word, const c10::Device& device) {
  TORCH_CHECK(t.defined(), name, " must be a defined tensor.");
  TORCH_CHECK(t.numel() == 1, name, " must be a 1-element tensor.");
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be a ", dtype_word, " tensor.");
  TORCH_CHECK(t.device() == device,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              device, " and ", t.device(), "! (", name, ")");
}

}  // namespace
}  // namespace detail

void non_finite_check_and_unscale_(at::TensorList grads, at::Tensor& found_inf,
                                   const at::Tensor& inv_scale) {
  constexpr const char* kWho = "non_finite_check_and_unscale_";
  if (grads.empty()) return;  // as PyTorch: an empty list checks nothing
  const c10::Device device = grads[0].device();
  detail::check_scalar_tensor(inv_scale, "inv_scale", at::kFloat, "float", device);
  detail::check_scalar_tensor(found_inf, "found_inf", at::kFloat, "float", device);
  TORCH_CHECK(found_inf.is_contiguous() && inv_scale.is_contiguous(), kWho,
              ": found_inf and inv_scale must be contiguous");

  std::vector<core::TensorView> views;
  views.reserve(grads.size());
  // Non-dense grads (e.g. g[:, :5]) are unscaled in a dense copy that is written back after.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (const at::Tensor& g : grads) {
    TORCH_CHECK(g.layout() == c10::kStrided, "one of scaled_grads was not a strided tensor.");
    TORCH_CHECK(g.device() == device, "scaled_grads must be on the same device.");
    detail::to_core_dtype(g.scalar_type(), kWho);
    if (g.numel() == 0) continue;
    if (g.is_non_overlapping_and_dense()) {
      views.push_back(detail::to_view(g, kWho));
    } else {
      copies.emplace_back(g, g.contiguous());
      views.push_back(detail::to_view(copies.back().second, kWho));
    }
  }
  detail::on_device(device, [&](void* stream) {
    core::non_finite_check_and_unscale_(views, found_inf.data_ptr<float>(),
                                        inv_scale.data_ptr<float>(), stream);
  });
  // In place, as PyTorch's op (which bumps every grad and found_inf, written or not).
  for (const at::Tensor& g : grads) detail::bump_version(g);
  detail::bump_version(found_inf);
  if (!copies.empty()) {
    c10::NoGradGuard no_grad;
    for (auto& [original, dense] : copies) original.copy_(dense);
  }
}

// Note [Copies between devices wait when they land on the CPU]
// GradScaler moves its scalars between the scale's device and the grads' (an embedding kept on
// the CPU while the scale is on CUDA, or the reverse). Towards CUDA a non-blocking copy is safe:
// it is queued on the stream before the kernels that read it. Towards the CPU it is not: the CPU
// kernels run at once, so one could read an inv_scale that has not arrived, and a found_inf = 1
// written by the CPU kernel could be overwritten by the late copy of the 0 it started from, and
// the step then applies inf. So every device copy of the adapter goes through
// detail::to_device(), which blocks exactly when the destination is the CPU.

void detail::update_scale_state_(at::Tensor& scale, at::Tensor& growth_tracker,
                                 const at::Tensor& found_inf, const core::ScalePolicy& policy,
                                 at::Tensor* counters, at::Tensor* history) {
  TORCH_CHECK(growth_tracker.defined() && scale.defined() && found_inf.defined(),
              "update_scale_: scale, growth_tracker and found_inf must be defined tensors.");
  TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(scale.numel() == 1, "current_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(scale.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  TORCH_CHECK(scale.device() == growth_tracker.device() && scale.device() == found_inf.device(),
              "Expected all tensors to be on the same device, but found scale on ", scale.device(),
              ", growth_tracker on ", growth_tracker.device(), " and found_inf on ",
              found_inf.device());
  std::int64_t* counter_ptr = nullptr;
  double* history_ptr = nullptr;
  std::int64_t history_rows = 0;
  if (counters != nullptr && counters->defined()) {
    TORCH_INTERNAL_ASSERT(counters->scalar_type() == at::kLong &&
                              counters->numel() == core::kNumCounters &&
                              counters->device() == scale.device() && counters->is_contiguous(),
                          "update_scale_: malformed telemetry counters");
    counter_ptr = counters->data_ptr<std::int64_t>();
    if (history != nullptr && history->defined() && history->numel() > 0) {
      TORCH_INTERNAL_ASSERT(history->scalar_type() == at::kDouble && history->is_contiguous() &&
                                history->device() == scale.device(),
                            "update_scale_: malformed scale history");
      history_ptr = history->data_ptr<double>();
      history_rows = history->size(0);
    }
  }
  on_device(scale.device(), [&](void* stream) {
    core::update_scale_(scale.data_ptr<float>(), growth_tracker.data_ptr<std::int32_t>(),
                        found_inf.data_ptr<float>(), policy,
                        to_core_device(scale.device(), "update_scale_"), stream, counter_ptr,
                        history_ptr, history_rows);
  });
  bump_version(scale);
  bump_version(growth_tracker);
  if (counter_ptr != nullptr) bump_version(*counters);
  if (history_ptr != nullptr) bump_version(*history);
}

void update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                   double growth_factor, double backoff_factor, std::int64_t growth_interval) {
  core::ScalePolicy policy;
  policy.growth_factor = growth_factor;
  policy.backoff_factor = backoff_factor;
  policy.growth_interval = growth_interval;
  detail::update_scale_state_(scale, growth_tracker, found_inf, policy, nullptr, nullptr);
}

std::vector<std::pair<c10::Device, at::Tensor>> unscale_grads_(torch::optim::Optimizer& optimizer,
                                                               const at::Tensor& inv_scale,
                                                               const at::Tensor& found_inf,
                                                               bool allow_fp16) {
  return detail::unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16,
                                /*own_found_inf=*/false);
}

at::Tensor detail::grad_to_unscale(at::Tensor& grad, bool allow_fp16) {
  TORCH_CHECK_VALUE(allow_fp16 || grad.scalar_type() != at::kHalf,
                    "Attempting to unscale FP16 gradients.");
  if (!grad.is_sparse()) return grad;
  // Coalescing sums duplicate indices, which may overflow fp16: check the sums.
  if (grad.scalar_type() == at::kHalf) grad = grad.coalesce();
  return grad._values();
}

std::vector<std::pair<c10::Device, at::Tensor>> detail::unscale_grads_(
    torch::optim::Optimizer& optimizer, const at::Tensor& inv_scale, const at::Tensor& found_inf,
    bool allow_fp16, bool own_found_inf) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      if (param.grad().defined()) grads.push_back(grad_to_unscale(param.mutable_grad(), allow_fp16));
    }
  }
  return unscale_grad_list_(grads, inv_scale, found_inf, own_found_inf);
}

std::vector<std::pair<c10::Device, at::Tensor>> detail::unscale_grad_list_(
    const std::vector<at::Tensor>& grads, const at::Tensor& inv_scale,
    const at::Tensor& found_inf, bool own_found_inf) {
  // device -> dtype -> grads, each level in first-seen order.
  using DTypeBuckets = std::vector<std::pair<c10::ScalarType, std::vector<at::Tensor>>>;
  std::vector<std::pair<c10::Device, DTypeBuckets>> buckets;
  c10::NoGradGuard no_grad;
  for (const at::Tensor& to_unscale : grads) {
    const c10::Device device = to_unscale.device();
    auto dev = std::find_if(buckets.begin(), buckets.end(),
                            [&](const auto& b) { return b.first == device; });
    if (dev == buckets.end()) dev = buckets.insert(buckets.end(), {device, {}});
    auto& dtypes = dev->second;
    auto typ = std::find_if(dtypes.begin(), dtypes.end(),
                            [&](const auto& b) { return b.first == to_unscale.scalar_type(); });
    if (typ == dtypes.end()) typ = dtypes.insert(dtypes.end(), {to_unscale.scalar_type(), {}});
    typ->second.push_back(to_unscale);
  }
  std::vector<std::pair<c10::Device, at::Tensor>> found_inf_per_device;
  for (auto& [device, dtypes] : buckets) {
    // A copy per device (PyTorch's _MultiDeviceReplicator), except that a found_inf the caller
    // hands over (own_found_inf) serves its own device; inv_scale is only read.
    at::Tensor found = own_found_inf && device == found_inf.device()
                           ? found_inf
                           : detail::to_device(found_inf, device, /*copy=*/true);
    const at::Tensor inv = device == inv_scale.device()
                               ? inv_scale
                               : detail::to_device(inv_scale, device, /*copy=*/true);
    for (auto& [dtype, group] : dtypes) non_finite_check_and_unscale_(group, found, inv);
    found_inf_per_device.emplace_back(device, std::move(found));
  }
  return found_inf_per_device;
}

}  // namespace mixprec
