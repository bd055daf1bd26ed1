// The kernel dispatch point of mixprec: argument checks, then the backend for the views' device.
// Every caller (LibTorch adapter, LossScaler, user engines) goes through here.
#include "mixprec/core/kernels.h"

#include "cpu/unscale.h"
#include "mixprec/core/error.h"

#ifdef MIXPREC_WITH_CUDA
#include "cuda/kernels.h"
#endif

namespace mixprec::core {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
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

const char* device_name(DeviceType type) { return type == DeviceType::kCPU ? "cpu" : "cuda"; }

#ifndef MIXPREC_WITH_CUDA
[[noreturn]] void throw_no_cuda(const char* who) {
  MIXPREC_CHECK(false, who,
                ": got CUDA buffers, but this build of mixprec has no CUDA kernels. "
                "Configure with -DMIXPREC_WITH_CUDA=ON.");
  __builtin_unreachable();
}
#endif

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
                  device_name(device.type), ":", device.index, ", grad ", i, " on ",
                  device_name(g.device.type), ":", g.device.index);
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

}  // namespace mixprec::core
