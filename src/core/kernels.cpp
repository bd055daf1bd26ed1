// The kernel dispatch point of mixprec: argument checks, then the backend for the views' device.
// Every caller (LibTorch adapter, LossScaler, user engines) goes through here: unscale-and-check,
// the scale update, the clipping norm and multiply, and the fused optimizers
// (include/mixprec/core/kernels.h, clip_kernels.h, optim_kernels.h);
// its FP8 half is kernels_fp8.cpp (mixprec/core/fp8.h).
#include "mixprec/core/kernels.h"

#include <string>

#include "core/dispatch.h"
#include "cpu/clip.h"
#include "cpu/fused_optim.h"
#include "cpu/unscale.h"
#include "mixprec/core/clip_kernels.h"
#include "mixprec/core/error.h"
#include "mixprec/core/optim_kernels.h"

#ifdef MIXPREC_WITH_CUDA
#include "cuda/kernels.h"
#endif

namespace mixprec::core {

#ifndef MIXPREC_WITH_CUDA
void detail::throw_no_cuda(const char* who) {
  MIXPREC_CHECK(false, who,
                ": got CUDA buffers, but this build of mixprec has no CUDA kernels. Build it "
                "with nvcc installed: MIXPREC_WITH_CUDA defaults to ON with a CUDA LibTorch, "
                "-DMIXPREC_WITH_CUDA=ON turns it on for mixprec::core alone (docs/install.md).");
  __builtin_unreachable();
}
#endif

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

bool cuda_kernels_built() {
#ifdef MIXPREC_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

// "cpu", "cuda:N", or "cuda" (the current device), as LibTorch prints devices.
std::string device_name(const Device& device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  return device.index < 0 ? "cuda" : "cuda:" + std::to_string(device.index);
}


void check_optim_view(const TensorView& view, const TensorView& param, const char* who,
                      std::size_t index, const char* name) {
  // The CUDA kernels compute in the parameter's type; the CPU ones also take fp16/bf16 storage.
  const bool wide = view.dtype == DType::kFloat32 || view.dtype == DType::kFloat64;
  MIXPREC_CHECK(wide || view.device.type == DeviceType::kCPU, who, ": parameter ", index, ": ",
                name, " is ", dtype_name(view.dtype),
                "; the fused optimizers support float32 and float64 on CUDA (float16 and bfloat16 "
                "on the CPU only)");
  MIXPREC_CHECK(view.dtype == param.dtype, who, ": parameter ", index, ": ", name, " is ",
                dtype_name(view.dtype), " but the parameter is ", dtype_name(param.dtype));
  MIXPREC_CHECK(view.numel == param.numel, who, ": parameter ", index, ": ", name, " has ",
                view.numel, " elements but the parameter has ", param.numel);
  MIXPREC_CHECK(view.data != nullptr || view.numel == 0, who, ": parameter ", index, ": ", name,
                " has ", view.numel, " elements but a null data pointer");
  MIXPREC_CHECK(view.device == param.device, who, ": parameter ", index, ": ", name, " is on ",
                device_name(view.device), " but the parameter is on ", device_name(param.device));
}

// The device of a fused step: that of the first parameter, which all others must share.
template <typename Tensors>
Device optim_device(const Tensors* params, std::size_t count, const char* who) {
  MIXPREC_CHECK(params != nullptr || count == 0, who, ": params is null but count is ", count);
  const Device device = count == 0 ? Device{} : params[0].param.device;
  for (std::size_t i = 0; i < count; ++i) {
    const Device d = params[i].param.device;
    MIXPREC_CHECK(d == device, who, ": all parameters must be on one device; parameter 0 is on ",
                  device_name(device), ", parameter ", i, " on ", device_name(d));
  }
  return device;
}

// CPU: true when the step must be skipped; sets *inv_scale (1 when there is no grad_scale).
bool read_scalars(const float* grad_scale, const float* found_inf, float* inv_scale) {
  if (found_inf != nullptr && *found_inf != 0.0f) return true;  // NaN skips too
  // The inverse GradScaler::unscale_ uses: Note [Fused unscale multiplies by the inverse] in
  // src/cpu/fused_optim.cpp.
  *inv_scale =
      grad_scale == nullptr ? 1.0f : static_cast<float>(1.0 / static_cast<double>(*grad_scale));
  return false;
}

// Runs a validated fused step: on CUDA `on_cuda()` queues the kernels, which decide on the device
// (true once queued); on the CPU found_inf and grad_scale are read here and `on_cpu(inv_scale)`
// runs unless the step is skipped (false then).
template <typename OnCuda, typename OnCpu>
bool run_fused(Device device, const char* who, const float* grad_scale, const float* found_inf,
               const OnCuda& on_cuda, const OnCpu& on_cpu) {
  if (device.type == DeviceType::kCUDA) {
#ifdef MIXPREC_WITH_CUDA
    on_cuda();
    return true;
#else
    (void)on_cuda;
    detail::throw_no_cuda(who);
#endif
  }
  float inv_scale = 1.0f;
  if (read_scalars(grad_scale, found_inf, &inv_scale)) return false;
  on_cpu(inv_scale);
  return true;
}

// The checks of a list of gradient views: sizes, pointers, one device (returned).
Device check_grad_views(const TensorView* grads, std::size_t count, const char* who) {
  MIXPREC_CHECK(grads != nullptr || count == 0, who, ": grads is null but count is ", count);
  const Device device = count == 0 ? Device{} : grads[0].device;
  for (std::size_t i = 0; i < count; ++i) {
    const TensorView& g = grads[i];
    MIXPREC_CHECK(g.numel >= 0, who, ": grad ", i, " has a negative element count ", g.numel);
    MIXPREC_CHECK(g.data != nullptr || g.numel == 0, who, ": grad ", i, " has ", g.numel,
                  " elements but a null data pointer");
    MIXPREC_CHECK(g.device == device, who, ": all grads must be on one device; grad 0 is on ",
                  device_name(device), ", grad ", i, " on ", device_name(g.device));
  }
  return device;
}

}  // namespace

void non_finite_check_and_unscale_(const TensorView* grads, std::size_t count, float* found_inf,
                                   const float* inv_scale, void* stream) {
  constexpr const char* kWho = "non_finite_check_and_unscale_";
  if (count == 0) return;  // as PyTorch: an empty list checks nothing
  MIXPREC_CHECK(found_inf != nullptr, kWho, ": found_inf must not be null");
  MIXPREC_CHECK(inv_scale != nullptr, kWho, ": inv_scale must not be null");
  const Device device = check_grad_views(grads, count, kWho);
  if (device.type == DeviceType::kCPU) {
    cpu::non_finite_check_and_unscale(grads, count, found_inf, *inv_scale);
    return;
  }
#ifdef MIXPREC_WITH_CUDA
  cuda::non_finite_check_and_unscale(grads, count, found_inf, inv_scale, stream);
#else
  (void)stream;
  detail::throw_no_cuda(kWho);
#endif
}


void grad_norm_(const TensorView* grads, std::size_t count, NormKind kind, const float* inv_scale,
                double* out, float* found_inf, double* per_view, void* stream) {
  constexpr const char* kWho = "grad_norm_";
  MIXPREC_CHECK(out != nullptr, kWho, ": out must not be null");
  MIXPREC_CHECK(kind == NormKind::kTwo || kind == NormKind::kInf, kWho, ": unknown norm kind ",
                static_cast<int>(kind));
  const Device device = check_grad_views(grads, count, kWho);
  if (device.type == DeviceType::kCPU) {
    cpu::grad_norm(grads, count, kind, inv_scale == nullptr ? 1.0f : *inv_scale, out, found_inf,
                   per_view);
    return;
  }
#ifdef MIXPREC_WITH_CUDA
  cuda::grad_norm(grads, count, kind, inv_scale, out, found_inf, per_view, stream);
#else
  (void)stream;
  detail::throw_no_cuda(kWho);
#endif
}

void unscale_and_clip_(const TensorView* grads, std::size_t count, const float* inv_scale,
                       const float* coef, void* stream) {
  constexpr const char* kWho = "unscale_and_clip_";
  MIXPREC_CHECK(coef != nullptr, kWho, ": coef must not be null");
  const Device device = check_grad_views(grads, count, kWho);
  if (count == 0) return;
  if (device.type == DeviceType::kCPU) {
    cpu::unscale_and_clip(grads, count, inv_scale == nullptr ? 1.0f : *inv_scale, *coef);
    return;
  }
#ifdef MIXPREC_WITH_CUDA
  cuda::unscale_and_clip(grads, count, inv_scale, coef, stream);
#else
  (void)stream;
  detail::throw_no_cuda(kWho);
#endif
}

void update_scale_(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                   const ScalePolicy& policy, Device device, void* stream, std::int64_t* counters,
                   double* history, std::int64_t history_capacity) {
  constexpr const char* kWho = "update_scale_";
  MIXPREC_CHECK(scale != nullptr && growth_tracker != nullptr && found_inf != nullptr, kWho,
                ": scale, growth_tracker and found_inf must not be null");
  MIXPREC_CHECK(history_capacity >= 0, kWho, ": history_capacity must be >= 0, got ",
                history_capacity);
  if (device.type == DeviceType::kCPU) {
    update_scale_state(scale, growth_tracker, counters, history, history_capacity, *found_inf,
                       policy);
    return;
  }
#ifdef MIXPREC_WITH_CUDA
  cuda::update_scale(scale, growth_tracker, found_inf, policy, stream, counters, history,
                     history_capacity);
#else
  (void)stream;
  detail::throw_no_cuda(kWho);
#endif
}

bool fused_sgd_(const SgdTensors* params, std::size_t count, const SgdHyper& hyper,
                const float* grad_scale, const float* found_inf, void* stream,
                const float* clip_coef) {
  constexpr const char* kWho = "fused_sgd_";
  const Device device = optim_device(params, count, kWho);
  const bool cuda = device.type == DeviceType::kCUDA;
  for (std::size_t i = 0; i < count; ++i) {
    const SgdTensors& t = params[i];
    check_optim_view(t.param, t.param, kWho, i, "param");
    check_optim_view(t.grad, t.param, kWho, i, "grad");
    if (hyper.momentum != 0.0) {
      check_optim_view(t.momentum_buffer, t.param, kWho, i, "momentum_buffer");
      MIXPREC_CHECK(!cuda || t.step_count != nullptr, kWho, ": parameter ", i,
                    ": CUDA parameters with momentum need a device step_count");
    }
  }
  return run_fused(
      device, kWho, grad_scale, found_inf,
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::fused_sgd(params, count, hyper, grad_scale, found_inf, stream, clip_coef);
#endif
      },
      [&](float inv_scale) { cpu::fused_sgd(params, count, hyper, inv_scale, clip_coef); });
}

bool fused_adam_(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                 const float* grad_scale, const float* found_inf, void* stream,
                 const float* clip_coef) {
  constexpr const char* kWho = "fused_adam_";
  const Device device = optim_device(params, count, kWho);
  const bool cuda = device.type == DeviceType::kCUDA;
  for (std::size_t i = 0; i < count; ++i) {
    const AdamTensors& t = params[i];
    check_optim_view(t.param, t.param, kWho, i, "param");
    check_optim_view(t.grad, t.param, kWho, i, "grad");
    check_optim_view(t.exp_avg, t.param, kWho, i, "exp_avg");
    check_optim_view(t.exp_avg_sq, t.param, kWho, i, "exp_avg_sq");
    if (hyper.amsgrad) check_optim_view(t.max_exp_avg_sq, t.param, kWho, i, "max_exp_avg_sq");
    if (cuda) {
      MIXPREC_CHECK(t.step_count != nullptr, kWho, ": parameter ", i,
                    ": CUDA parameters need a device step_count");
    } else {
      MIXPREC_CHECK(t.step >= 1, kWho, ": parameter ", i, ": step must be >= 1 (the number of ",
                    "this step, counting from 1), got ", t.step);
    }
  }
  return run_fused(
      device, kWho, grad_scale, found_inf,
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::fused_adam(params, count, hyper, grad_scale, found_inf, stream, clip_coef);
#endif
      },
      [&](float inv_scale) { cpu::fused_adam(params, count, hyper, inv_scale, clip_coef); });
}

}  // namespace mixprec::core
