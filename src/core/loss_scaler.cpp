// LossScaler: the raw-buffer scaler of the core (see include/mixprec/core/loss_scaler.h).
#include "mixprec/core/loss_scaler.h"

#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {

void validate_scaler_options(const char* who, double init_scale, const ScalePolicy& policy) {
  MIXPREC_CHECK(std::isfinite(init_scale) && init_scale > 0.0, who,
                ": init_scale must be finite and > 0, got ", init_scale);
  MIXPREC_CHECK(static_cast<float>(init_scale) > 0.0f &&
                    std::isfinite(static_cast<float>(init_scale)),
                who, ": init_scale must be representable as a positive finite float32, got ",
                init_scale);
  MIXPREC_CHECK(policy.growth_factor > 1.0, who, ": growth_factor must be > 1.0, got ",
                policy.growth_factor);
  MIXPREC_CHECK(policy.backoff_factor > 0.0 && policy.backoff_factor < 1.0, who,
                ": backoff_factor must be in (0, 1), got ", policy.backoff_factor);
  MIXPREC_CHECK(policy.growth_interval >= 1, who, ": growth_interval must be >= 1, got ",
                policy.growth_interval);
  MIXPREC_CHECK(policy.hysteresis >= 1, who, ": hysteresis must be >= 1, got ", policy.hysteresis);
  MIXPREC_CHECK(std::isfinite(policy.min_scale) && policy.min_scale >= 0.0f, who,
                ": min_scale must be finite and >= 0, got ", policy.min_scale);
  MIXPREC_CHECK(policy.max_scale > 0.0f && !std::isnan(policy.max_scale), who,
                ": max_scale must be > 0, got ", policy.max_scale);
  MIXPREC_CHECK(policy.min_scale <= policy.max_scale, who, ": min_scale (", policy.min_scale,
                ") must not exceed max_scale (", policy.max_scale, ")");
}

LossScaler::LossScaler(LossScalerOptions options) : policy_(options.policy) {
  validate_scaler_options("LossScaler", options.init_scale, policy_);
  state_.scale = static_cast<float>(options.init_scale);
  state_.growth_tracker = 0;
  state_.hysteresis_tracker = policy_.hysteresis;  // full, as GradScaler's init_counters()
}

bool LossScaler::unscale_(const std::vector<TensorView>& grads) {
  for (const TensorView& g : grads) {
    MIXPREC_CHECK(g.device.type == DeviceType::kCPU,
                  "LossScaler: unscale_ takes CPU buffers only; use mixprec::GradScaler or "
                  "core::non_finite_check_and_unscale_ for CUDA buffers");
  }
  float found = 0.0f;
  const float inv_scale = inverse_scale(state_.scale);
  non_finite_check_and_unscale_(grads, &found, &inv_scale);
  checked_ = true;
  if (found != 0.0f) found_inf_ = 1.0f;
  return found == 0.0f;
}

void LossScaler::update() {
  MIXPREC_CHECK(checked_, "LossScaler: No inf checks were recorded prior to update. "
                          "Call unscale_() on the gradients after backward and before update().");
  state_ = next_scale_state(state_, found_inf_, policy_);
  found_inf_ = 0.0f;
  checked_ = false;
}

}  // namespace mixprec::core
