// Options of mixprec::GradScaler, fluent like torch::optim::SGDOptions.
#pragma once

#include <cstdint>

#include "mixprec/core/scale_policy.h"

namespace mixprec {

/// Generates `T& name(T)` (returns *this) and `T name() const`, as TORCH_ARG does.
#define MIXPREC_ARG(T, name, default_value)          \
 public:                                             \
  GradScalerOptions& name(T value) {                 \
    name##_ = value;                                 \
    return *this;                                    \
  }                                                  \
  T name() const { return name##_; }                 \
                                                     \
 private:                                            \
  T name##_ = default_value;

/// Options of GradScaler; every default is torch.amp.GradScaler's.
///
/// **Example**
/// ```cpp
/// mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(1024.0).growth_interval(100));
/// ```
class GradScalerOptions {
  /// Initial scale factor (2^16). Must be finite and > 0.
  MIXPREC_ARG(double, init_scale, 65536.0)
  /// Factor the scale grows by after growth_interval clean steps (2.0). Must be > 1.
  MIXPREC_ARG(double, growth_factor, 2.0)
  /// Factor the scale is multiplied by after an overflow (0.5). Must be in (0, 1).
  MIXPREC_ARG(double, backoff_factor, 0.5)
  /// Consecutive clean steps before the scale grows (2000). Must be >= 1.
  MIXPREC_ARG(std::int64_t, growth_interval, 2000)
  /// false: the scaler is a pass-through (scale() returns its input, step() just steps).
  MIXPREC_ARG(bool, enabled, true)

 public:
  /// The update rule's constants, for the core.
  core::ScalePolicy policy() const {
    core::ScalePolicy p;
    p.growth_factor = growth_factor_;
    p.backoff_factor = backoff_factor_;
    p.growth_interval = growth_interval_;
    return p;
  }
};

#undef MIXPREC_ARG

}  // namespace mixprec
