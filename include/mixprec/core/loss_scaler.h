// A small dynamic loss scaler over raw CPU buffers, for C++ training engines without LibTorch.
// Same rule and kernel as mixprec::GradScaler (see scale_policy.h and kernels.h).
#pragma once

#include <cstdint>
#include <vector>

#include "mixprec/core/scale_policy.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// Options of LossScaler; the defaults are torch.amp.GradScaler's.
struct LossScalerOptions {
  /// The scale before the first update (2^16).
  double init_scale = 65536.0;
  /// The update rule's constants (growth, backoff, interval, and the options beyond PyTorch). The
  /// hysteresis tracker starts full, as GradScaler's: with hysteresis N the first N - 1
  /// overflows are skipped without a backoff.
  ScalePolicy policy = {};
};

/// Dynamic loss scaling for an engine that owns its buffers (CPU views).
///
/// **Example**
/// ```cpp
/// mixprec::core::LossScaler scaler;
/// for (...) {
///   float loss = forward();
///   backward(scaler.scale(loss));                   // gradients come out multiplied by scale
///   if (scaler.unscale_(grad_views)) sgd_step();     // false: inf/NaN found, skip the step
///   scaler.update();                                 // back off or grow the scale
/// }
/// ```
class LossScaler {
 public:
  /// Throws Error for init_scale not finite or <= 0, growth_factor <= 1,
  /// backoff_factor outside (0, 1) or growth_interval < 1.
  explicit LossScaler(LossScalerOptions options = {});

  /// `loss * scale()`, the value to back-propagate.
  double scale(double loss) const { return loss * static_cast<double>(state_.scale); }

  /// Divides the gradients in place by the scale and checks them for inf/NaN. Returns true when
  /// all were finite (the optimizer step may be applied). Several calls before one update()
  /// accumulate: one overflow anywhere makes the update back off.
  bool unscale_(const std::vector<TensorView>& grads);

  /// Applies the update rule with the overflow seen since the last update(), then forgets it.
  /// Throws Error when no unscale_() was recorded since the last update().
  void update();

  /// The current scale.
  double get_scale() const { return state_.scale; }
  /// Consecutive clean steps counted towards the next growth.
  std::int32_t growth_tracker() const { return state_.growth_tracker; }
  /// The policy in use.
  const ScalePolicy& policy() const { return policy_; }

 private:
  ScalePolicy policy_;
  ScaleState state_;
  float found_inf_ = 0.0f;
  bool checked_ = false;
};

/// Throws Error naming the option and value when a GradScaler/LossScaler option is invalid:
/// init_scale not finite or <= 0, growth_factor <= 1, backoff_factor outside (0, 1),
/// growth_interval < 1. `who` prefixes the message ("GradScaler", "LossScaler").
void validate_scaler_options(const char* who, double init_scale, const ScalePolicy& policy);

}  // namespace mixprec::core
