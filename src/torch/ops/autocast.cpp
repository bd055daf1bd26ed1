// mixprec::AutocastGuard (include/mixprec/autocast.h): Python's torch.autocast __enter__/__exit__
// over LibTorch's thread-local autocast state, for the 1.13 and the >= 2.4 function names.
#include "mixprec/autocast.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include "mixprec/torch_version.h"

namespace mixprec {
namespace {

// LibTorch 2.4 replaced the per-device functions (set_enabled, set_cpu_enabled, ...) by ones that
// take a DeviceType. Delete the #else branches when LibTorch < 2.4 is no longer supported.
#if MIXPREC_TORCH_DEVICE_AUTOCAST_API
bool is_enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
c10::ScalarType get_dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
bool is_enabled(c10::DeviceType d) {
  return d == c10::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void set_enabled(c10::DeviceType d, bool on) {
  if (d == c10::kCPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
}
c10::ScalarType get_dtype(c10::DeviceType d) {
  return d == c10::kCPU ? at::autocast::get_autocast_cpu_dtype()
                        : at::autocast::get_autocast_gpu_dtype();
}
void set_dtype(c10::DeviceType d, c10::ScalarType t) {
  if (d == c10::kCPU) {
    at::autocast::set_autocast_cpu_dtype(t);
  } else {
    at::autocast::set_autocast_gpu_dtype(t);
  }
}
#endif

// CPU autocast took float16 in LibTorch 2.2; 1.13 knows only bfloat16.
constexpr bool kCpuHalfSupported = MIXPREC_TORCH_CPU_FP16_AUTOCAST;

}  // namespace

bool AutocastGuard::is_supported(c10::DeviceType device_type, c10::ScalarType dtype) {
  if (device_type == c10::kCUDA) return dtype == c10::kHalf || dtype == c10::kBFloat16;
  if (device_type == c10::kCPU) {
    return dtype == c10::kBFloat16 || (kCpuHalfSupported && dtype == c10::kHalf);
  }
  return false;
}

namespace {

// Throws, before anything changed, for combinations autocast cannot run.
void check_supported(c10::DeviceType device_type, c10::ScalarType dtype) {
  if (AutocastGuard::is_supported(device_type, dtype)) return;
  TORCH_CHECK(device_type == c10::kCPU || device_type == c10::kCUDA,
              "AutocastGuard: device_type must be CPU or CUDA, got ", device_type);
  TORCH_CHECK(device_type != c10::kCPU, "AutocastGuard: CPU autocast supports ",
              kCpuHalfSupported ? "torch.bfloat16 and torch.float16" : "only torch.bfloat16",
              " in this LibTorch (", TORCH_VERSION, "), got ", dtype,
              ". For fp16 on the CPU, use a newer LibTorch or emulate it by casting.");
  TORCH_CHECK(false, "AutocastGuard: CUDA autocast supports torch.float16 and torch.bfloat16, got ",
              dtype);
}

}  // namespace

AutocastGuard::AutocastGuard(c10::DeviceType device_type, c10::optional<c10::ScalarType> dtype,
                             bool enabled, bool cache_enabled)
    : device_type_(device_type),
      dtype_(dtype.value_or(c10::kFloat)),
      enabled_(enabled),
      prev_enabled_(false),
      prev_dtype_(c10::kFloat),
      prev_cache_enabled_(at::autocast::is_autocast_cache_enabled()) {
  if (device_type == c10::kCPU || device_type == c10::kCUDA) {
    dtype_ = dtype.value_or(get_dtype(device_type));
  }
  check_supported(device_type, dtype_);
  if (enabled_ && device_type == c10::kCUDA && !torch::cuda::is_available()) {
    // As Python's torch.autocast: warn and run the region without autocast, in the words of the
    // PyTorch this LibTorch is (MIXPREC_TORCH_AUTOCAST_WARNING_NAMES_XLA).
#if MIXPREC_TORCH_AUTOCAST_WARNING_NAMES_XLA
    TORCH_WARN_ONCE("CUDA is not available or torch_xla is imported. Disabling autocast.");
#else
    TORCH_WARN_ONCE("User provided device_type of 'cuda', but CUDA is not available. Disabling");
#endif
    enabled_ = false;
  }
  prev_enabled_ = is_enabled(device_type_);
  prev_dtype_ = get_dtype(device_type_);
  set_enabled(device_type_, enabled_);
  set_dtype(device_type_, dtype_);
  at::autocast::increment_nesting();
  at::autocast::set_autocast_cache_enabled(cache_enabled);
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_type_, prev_enabled_);
  set_dtype(device_type_, prev_dtype_);
  at::autocast::set_autocast_cache_enabled(prev_cache_enabled_);
}

}  // namespace mixprec
