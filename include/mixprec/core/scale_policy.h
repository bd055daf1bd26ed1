// THE scale-update rule of mixprec: one pure host/device function that every path (the CPU
// adapter, the CUDA one-thread kernel, the raw-buffer LossScaler) calls. See Note [One update rule].
#pragma once

#include <cstdint>

#include "mixprec/core/half.h"
#include "mixprec/core/macros.h"

namespace mixprec::core {

// Note [One update rule]
// PyTorch writes _amp_update_scale_ twice (CPU and CUDA) and the copies have drifted before;
// Flashlight's DynamicScaler compared the scale with the interval and no test caught it.
// mixprec writes the rule once, as a pure function of (state, found_inf, policy), so it can be
// tested transition by transition, run in a one-thread CUDA kernel, and checked against a
// reference model. Later options (hysteresis, min/max scale) extend ScalePolicy and ScaleState
// here, and nowhere else.

/// The constants of the rule; the defaults are torch.amp.GradScaler's.
struct ScalePolicy {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

/// The mutable state of the rule: the scale (float32, as PyTorch keeps it) and the number of
/// consecutive clean steps since the last growth or backoff.
struct ScaleState {
  float scale = 65536.0f;
  std::int32_t growth_tracker = 0;
};

/// One update, with exactly the semantics of torch._amp_update_scale_:
/// - `found_inf` non-zero (NaN included): scale *= backoff_factor (in double, rounded to
///   float; no lower bound), tracker = 0;
/// - otherwise the step counts as clean: when tracker + 1 == growth_interval the scale grows by
///   growth_factor unless that would make it non-finite, and the tracker resets to 0 (also when
///   growth was suppressed); else the tracker counts up (saturating at INT32_MAX instead of
///   overflowing, for growth_interval <= 0 where the scale never grows).
MIXPREC_HOST_DEVICE inline ScaleState next_scale_state(ScaleState state, float found_inf,
                                                       const ScalePolicy& policy) {
  if (found_inf != 0.0f) {  // NaN != 0 is true, as in PyTorch's kernels
    state.scale = static_cast<float>(static_cast<double>(state.scale) * policy.backoff_factor);
    state.growth_tracker = 0;
    return state;
  }
  const std::int64_t successful = static_cast<std::int64_t>(state.growth_tracker) + 1;
  if (successful == policy.growth_interval) {
    const float grown =
        static_cast<float>(static_cast<double>(state.scale) * policy.growth_factor);
    if (!is_nonfinite(grown)) state.scale = grown;
    state.growth_tracker = 0;
  } else {
    state.growth_tracker =
        successful > INT32_MAX ? INT32_MAX : static_cast<std::int32_t>(successful);
  }
  return state;
}

/// The reciprocal PyTorch multiplies gradients by: computed in double, rounded to float
/// (exact for powers of two).
MIXPREC_HOST_DEVICE inline float inverse_scale(float scale) {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

}  // namespace mixprec::core
