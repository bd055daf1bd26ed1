// Options of mixprec::GradScaler, fluent like torch::optim::SGDOptions.
#pragma once

#include <cstdint>
#include <functional>

#include "mixprec/core/scale_policy.h"

namespace mixprec {

/// What GradScaler does when the gradients overflow while the scale is already at min_scale.
enum class AtMinScale {
  kClamp,     ///< keep the scale at min_scale and go on (steps keep being skipped)
  kThrow,     ///< throw c10::Error from update(), saying what to try
  kCallback,  ///< call GradScalerOptions::on_min_scale with the scale
};

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

  // Beyond PyTorch (docs/options.md); each default keeps PyTorch's behaviour.

  /// Overflows tolerated before the scale backs off (1: every overflow, as PyTorch). Every
  /// overflow still skips its step. Megatron-LM and DeepSpeed default to 2.
  MIXPREC_ARG(std::int32_t, hysteresis, 1)
  /// When the hysteresis counter refills: on growth (Megatron) or on every clean step
  /// (DeepSpeed's consecutive_hysteresis).
  MIXPREC_ARG(core::HysteresisRefill, hysteresis_refill, core::HysteresisRefill::kOnGrowth)
  /// Backoff never goes below this when > 0 (0: no floor, as PyTorch). Values below 1 allowed.
  MIXPREC_ARG(double, min_scale, 0.0)
  /// Growth never goes above this (default: the largest float, i.e. only kept finite).
  MIXPREC_ARG(double, max_scale, 3.4028234663852886e+38)
  /// What an overflow at min_scale does: keep going (kClamp), throw from update() (kThrow), or
  /// call on_min_scale (kCallback).
  MIXPREC_ARG(AtMinScale, at_min_scale, AtMinScale::kClamp)
  /// Called from update() on an overflow at min_scale when at_min_scale is kCallback.
  MIXPREC_ARG(std::function<void(double)>, on_min_scale, nullptr)
  /// Rows of (iteration, scale, overflow) kept in a ring on the scale's device (0: none).
  MIXPREC_ARG(std::int64_t, history_size, 0)
  /// On an overflow, find which parameters held inf/NaN (costs a host read of found_inf per check,
  /// and a scan of the gradients on overflow steps only). With a SupportsAmpScaling optimizer the
  /// scan runs before the optimizer unscales: reported values are still scaled. See
  /// GradScaler::last_overflow_report().
  MIXPREC_ARG(bool, diagnose_overflow, false)

 public:
  /// True when any option beyond PyTorch's differs from its default: the state_dict then carries
  /// mixprec's extra keys.
  bool uses_extensions() const {
    return hysteresis_ != 1 || hysteresis_refill_ != core::HysteresisRefill::kOnGrowth ||
           min_scale_ != 0.0 || max_scale_ != 3.4028234663852886e+38 ||
           at_min_scale_ != AtMinScale::kClamp || history_size_ != 0;
  }

  /// The update rule's constants, for the core.
  core::ScalePolicy policy() const {
    core::ScalePolicy p;
    p.growth_factor = growth_factor_;
    p.backoff_factor = backoff_factor_;
    p.growth_interval = growth_interval_;
    p.hysteresis = hysteresis_;
    p.hysteresis_refill = hysteresis_refill_;
    p.min_scale = static_cast<float>(min_scale_);
    p.max_scale = static_cast<float>(max_scale_);
    return p;
  }
};

#undef MIXPREC_ARG

}  // namespace mixprec
