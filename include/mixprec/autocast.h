// mixprec::AutocastGuard: `with torch.autocast(device_type, dtype, enabled, cache_enabled):` as RAII.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>

namespace mixprec {

/// Turns LibTorch's autocast on (or off) for one device type for the guard's lifetime, and puts
/// the previous state back on destruction, also while an exception unwinds. Nesting and the cast
/// cache behave as in Python: the cache is cleared when the outermost guard exits.
///
/// **Example**
/// ```cpp
/// {
///   mixprec::AutocastGuard autocast(torch::kCUDA);          // fp16 on CUDA
///   loss = criterion(model->forward(x), y);
/// }
/// {
///   mixprec::AutocastGuard autocast(torch::kCPU);           // bf16 on the CPU
///   out = model->forward(x);
/// }
/// ```
///
/// Supported: CUDA with Half or BFloat16; CPU with BFloat16 (and Half from LibTorch 2.2).
/// Anything else throws c10::Error before any state changes. As in Python, asking for CUDA when
/// no CUDA device is available warns once and leaves autocast disabled inside the guard.
class AutocastGuard {
 public:
  /// `dtype` defaults to the device type's current autocast dtype (Half on CUDA, BFloat16 on the
  /// CPU unless changed).
  explicit AutocastGuard(c10::DeviceType device_type,
                         c10::optional<c10::ScalarType> dtype = c10::nullopt, bool enabled = true,
                         bool cache_enabled = true);
  ~AutocastGuard();

  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard(AutocastGuard&&) = delete;
  AutocastGuard& operator=(AutocastGuard&&) = delete;

  /// Whether this LibTorch's autocast can run `dtype` on `device_type` (the combinations the
  /// constructor accepts): CUDA with Half or BFloat16; CPU with BFloat16, and with Half from
  /// LibTorch 2.2. Says nothing about whether a CUDA device is present.
  static bool is_supported(c10::DeviceType device_type, c10::ScalarType dtype);

  /// Whether autocast is on inside this guard (false when disabled or CUDA is missing).
  bool enabled() const { return enabled_; }
  /// The autocast dtype set by this guard.
  c10::ScalarType dtype() const { return dtype_; }

 private:
  c10::DeviceType device_type_;
  c10::ScalarType dtype_;
  bool enabled_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
  bool prev_cache_enabled_;
};

}  // namespace mixprec
