// The kernel dispatch point of mixprec: argument checks, then the backend for the views' device.
// Every caller (LibTorch adapter, LossScaler, user engines) goes through here: unscale-and-check,
// the scale update, the fused optimizers and the FP8 kernels (include/mixprec/core/kernels.h,
// optim_kernels.h, fp8.h).
#include "mixprec/core/kernels.h"

#include <string>

#include "core/fp8_ops.h"
#include "cpu/fp8.h"
#include "cpu/fused_optim.h"
#include "cpu/unscale.h"
#include "mixprec/core/error.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/optim_kernels.h"

#ifdef MIXPREC_WITH_CUDA
#include "cuda/kernels.h"
#endif

namespace mixprec::core {

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

#ifndef MIXPREC_WITH_CUDA
[[noreturn]] void throw_no_cuda(const char* who) {
  MIXPREC_CHECK(false, who,
                ": got CUDA buffers, but this build of mixprec has no CUDA kernels. Build it "
                "with nvcc installed: MIXPREC_WITH_CUDA defaults to ON with a CUDA LibTorch, "
                "-DMIXPREC_WITH_CUDA=ON turns it on for mixprec::core alone (docs/install.md).");
  __builtin_unreachable();
}
#endif

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
    throw_no_cuda(who);
#endif
  }
  float inv_scale = 1.0f;
  if (read_scalars(grad_scale, found_inf, &inv_scale)) return false;
  on_cpu(inv_scale);
  return true;
}

}  // namespace

void non_finite_check_and_unscale_(const TensorView* grads, std::size_t count, float* found_inf,
                                   const float* inv_scale, void* stream) {
  constexpr const char* kWho = "non_finite_check_and_unscale_";
  if (count == 0) return;  // as PyTorch: an empty list checks nothing
  MIXPREC_CHECK(grads != nullptr, kWho, ": grads is null but count is ", count);
  MIXPREC_CHECK(found_inf != nullptr, kWho, ": found_inf must not be null");
  MIXPREC_CHECK(inv_scale != nullptr, kWho, ": inv_scale must not be null");
  const Device device = grads[0].device;
  for (std::size_t i = 0; i < count; ++i) {
    const TensorView& g = grads[i];
    MIXPREC_CHECK(g.numel >= 0, kWho, ": grad ", i, " has a negative element count ", g.numel);
    MIXPREC_CHECK(g.data != nullptr || g.numel == 0, kWho, ": grad ", i, " has ", g.numel,
                  " elements but a null data pointer");
    MIXPREC_CHECK(g.device == device, kWho, ": all grads must be on one device; grad 0 is on ",
                  device_name(device), ", grad ", i, " on ", device_name(g.device));
  }
  if (device.type == DeviceType::kCPU) {
    cpu::non_finite_check_and_unscale(grads, count, found_inf, *inv_scale);
    return;
  }
#ifdef MIXPREC_WITH_CUDA
  cuda::non_finite_check_and_unscale(grads, count, found_inf, inv_scale, stream);
#else
  (void)stream;
  throw_no_cuda(kWho);
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
  throw_no_cuda(kWho);
#endif
}

bool fused_sgd_(const SgdTensors* params, std::size_t count, const SgdHyper& hyper,
                const float* grad_scale, const float* found_inf, void* stream) {
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
        cuda::fused_sgd(params, count, hyper, grad_scale, found_inf, stream);
#endif
      },
      [&](float inv_scale) { cpu::fused_sgd(params, count, hyper, inv_scale); });
}

bool fused_adam_(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                 const float* grad_scale, const float* found_inf, void* stream) {
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
        cuda::fused_adam(params, count, hyper, grad_scale, found_inf, stream);
#endif
      },
      [&](float inv_scale) { cpu::fused_adam(params, count, hyper, inv_scale); });
}

// ---- FP8 (include/mixprec/core/fp8.h) ----------------------------------------------------------

const char* fp8_format_name(Fp8Format format) {
  switch (format) {
    case Fp8Format::kE4M3:
      return "e4m3";
    case Fp8Format::kE5M2:
      return "e5m2";
  }
  return "unknown";
}

namespace {

void check_format(Fp8Format format, const char* who) {
  MIXPREC_CHECK(format == Fp8Format::kE4M3 || format == Fp8Format::kE5M2, who,
                ": unsupported FP8 format ", static_cast<int>(format),
                " (Fp8Format::kE4M3 or kE5M2)");
}

void check_nan(NanAmax nan, const char* who) {
  MIXPREC_CHECK(nan == NanAmax::kIgnore || nan == NanAmax::kPropagate, who,
                ": unsupported NanAmax ", static_cast<int>(nan), " (kIgnore or kPropagate)");
}

// A float input or output view.
void check_fp8_view(const TensorView& view, const char* who, const char* name) {
  MIXPREC_CHECK(element_size(view.dtype) != 0, who, ": ", name, " has an unsupported dtype (",
                static_cast<int>(view.dtype), "); float32, float64, float16 and bfloat16 are");
  MIXPREC_CHECK(view.numel >= 0, who, ": ", name, " has a negative element count ", view.numel);
  MIXPREC_CHECK(view.data != nullptr || view.numel == 0, who, ": ", name, " has ", view.numel,
                " elements but a null data pointer");
}

// The view, and the byte buffer `q` of as many elements beside it.
void check_fp8_view(const TensorView& view, const char* who, const char* name,
                    const std::uint8_t* q) {
  check_fp8_view(view, who, name);
  MIXPREC_CHECK(q != nullptr || view.numel == 0, who, ": q is null but ", name, " has ", view.numel,
                " elements");
}

void check_mx(const TensorView& view, std::int64_t cols, const std::uint8_t* scales,
              const char* who, const char* name) {
  MIXPREC_CHECK(cols > 0, who, ": cols must be > 0, got ", cols);
  MIXPREC_CHECK(view.numel % cols == 0, who, ": ", name, " has ", view.numel,
                " elements, not a multiple of cols = ", cols, " (it is read as rows of cols)");
  MIXPREC_CHECK(scales != nullptr || view.numel == 0, who, ": scales is null but ", name, " has ",
                view.numel, " elements");
}

// Runs on_cpu() for CPU buffers, on_cuda() for CUDA ones (where built).
template <typename OnCpu, typename OnCuda>
void run_fp8(Device device, const char* who, const OnCpu& on_cpu, const OnCuda& on_cuda) {
  if (device.type == DeviceType::kCPU) {
    on_cpu();
    return;
  }
#ifdef MIXPREC_WITH_CUDA
  (void)who;
  on_cuda();
#else
  (void)on_cuda;
  throw_no_cuda(who);
#endif
}

}  // namespace

void amax_(const TensorView& x, float* amax, void* stream, NanAmax nan) {
  constexpr const char* kWho = "amax_";
  check_fp8_view(x, kWho, "x");
  check_nan(nan, kWho);
  MIXPREC_CHECK(amax != nullptr, kWho, ": amax must not be null");
  run_fp8(
      x.device, kWho, [&] { cpu::amax(x, amax, nan); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::amax(x, amax, nan, stream);
#endif
      });
  (void)stream;
}

void quantize_fp8_(const TensorView& x, std::uint8_t* q, Fp8Format format, const float* scale,
                   float* amax, void* stream, NanAmax nan) {
  constexpr const char* kWho = "quantize_fp8_";
  check_format(format, kWho);
  check_fp8_view(x, kWho, "x", q);
  MIXPREC_CHECK(scale != nullptr, kWho, ": scale must not be null");
  check_nan(nan, kWho);
  run_fp8(
      x.device, kWho, [&] { cpu::quantize_fp8(x, q, format, *scale, amax, nan); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_fp8(x, q, format, scale, amax, nan, stream);
#endif
      });
  (void)stream;
}

void quantize_fp8_current_(const TensorView& x, std::uint8_t* q, Fp8Format format,
                           const CurrentScaling& rule, float* scale, float* scale_inv, float* amax,
                           void* stream) {
  constexpr const char* kWho = "quantize_fp8_current_";
  check_format(format, kWho);
  check_fp8_view(x, kWho, "x", q);
  MIXPREC_CHECK(scale != nullptr && scale_inv != nullptr && amax != nullptr, kWho,
                ": scale, scale_inv and amax must not be null");
  MIXPREC_CHECK(rule.eps >= 0.0f && !is_nonfinite(rule.eps), kWho,
                ": CurrentScaling::eps must be finite and >= 0, got ", rule.eps);
  check_nan(rule.nan, kWho);
  run_fp8(
      x.device, kWho,
      [&] {
        float found = 0.0f;
        cpu::amax(x, &found, rule.nan);
        *amax = found;
        *scale = current_scale(found, fp8_max(format), rule);
        *scale_inv = 1.0f / *scale;
        cpu::quantize_fp8(x, q, format, *scale, nullptr, NanAmax::kPropagate);
      },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_fp8_current(x, q, format, rule, scale, scale_inv, amax, stream);
#endif
      });
  (void)stream;
}

void dequantize_fp8_(const std::uint8_t* q, Fp8Format format, const float* scale_inv,
                     const TensorView& out, void* stream) {
  constexpr const char* kWho = "dequantize_fp8_";
  check_format(format, kWho);
  check_fp8_view(out, kWho, "out", q);
  MIXPREC_CHECK(scale_inv != nullptr, kWho, ": scale_inv must not be null");
  run_fp8(
      out.device, kWho, [&] { cpu::dequantize_fp8(q, format, *scale_inv, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::dequantize_fp8(q, format, scale_inv, out, stream);
#endif
      });
  (void)stream;
}

void quantize_mxfp8_(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                     Fp8Format format, void* stream, NanAmax nan) {
  constexpr const char* kWho = "quantize_mxfp8_";
  check_format(format, kWho);
  check_fp8_view(x, kWho, "x", q);
  check_mx(x, cols, scales, kWho, "x");
  check_nan(nan, kWho);
  run_fp8(
      x.device, kWho, [&] { cpu::quantize_mxfp8(x, cols, q, scales, format, nan); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_mxfp8(x, cols, q, scales, format, nan, stream);
#endif
      });
  (void)stream;
}

void dequantize_mxfp8_(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                       Fp8Format format, const TensorView& out, void* stream) {
  constexpr const char* kWho = "dequantize_mxfp8_";
  check_format(format, kWho);
  check_fp8_view(out, kWho, "out", q);
  check_mx(out, cols, scales, kWho, "out");
  run_fp8(
      out.device, kWho, [&] { cpu::dequantize_mxfp8(q, scales, cols, format, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::dequantize_mxfp8(q, scales, cols, format, out, stream);
#endif
      });
  (void)stream;
}

void delayed_scaling_update_(const DelayedTensor* tensors, std::size_t count,
                             const DelayedScaling& rule, Device device, void* stream) {
  constexpr const char* kWho = "delayed_scaling_update_";
  if (count == 0) return;
  MIXPREC_CHECK(tensors != nullptr, kWho, ": tensors is null but count is ", count);
  MIXPREC_CHECK(rule.history_len >= 1, kWho, ": DelayedScaling::history_len must be >= 1, got ",
                rule.history_len);
  MIXPREC_CHECK(rule.algo == AmaxAlgo::kMax || rule.algo == AmaxAlgo::kMostRecent, kWho,
                ": unsupported AmaxAlgo ", static_cast<int>(rule.algo));
  check_nan(rule.nan, kWho);
  // delayed_scale() divides by 2^margin as a normal float power of two.
  MIXPREC_CHECK(rule.margin >= kMinMargin && rule.margin <= kMaxMargin, kWho,
                ": DelayedScaling::margin must be in [", kMinMargin, ", ", kMaxMargin, "], got ",
                rule.margin);
  for (std::size_t i = 0; i < count; ++i) {
    const DelayedTensor& t = tensors[i];
    MIXPREC_CHECK(t.amax_history != nullptr && t.scale != nullptr && t.scale_inv != nullptr, kWho,
                  ": tensor ", i, ": amax_history, scale and scale_inv must not be null");
    MIXPREC_CHECK(t.stride >= 1, kWho, ": tensor ", i, ": stride must be >= 1, got ", t.stride);
    check_format(t.format, kWho);
  }
  run_fp8(
      device, kWho,
      [&] {
        for (std::size_t i = 0; i < count; ++i) delayed_update_one(tensors[i], rule);
      },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::delayed_scaling_update(tensors, count, rule, stream);
#endif
      });
  (void)stream;
}

}  // namespace mixprec::core
