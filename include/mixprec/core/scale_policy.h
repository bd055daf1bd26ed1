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
// reference model. Options beyond PyTorch (hysteresis, min/max scale) live here too, and with
// their defaults the rule is exactly torch._amp_update_scale_.

/// What the hysteresis counter refills on.
enum class HysteresisRefill : std::uint8_t {
  kOnGrowth = 0,     ///< Megatron-LM, DeepSpeed's default: refilled when the scale grows.
  kOnCleanStep = 1,  ///< DeepSpeed's consecutive_hysteresis: refilled by every clean step.
};

/// The constants of the rule; the defaults are torch.amp.GradScaler's.
struct ScalePolicy {
  double growth_factor = 2.0;           ///< scale *= growth_factor every growth_interval clean steps
  double backoff_factor = 0.5;          ///< scale *= backoff_factor on an overflow
  std::int64_t growth_interval = 2000;  ///< clean steps between growths
  /// Overflows tolerated before the scale backs off (1: every overflow backs off, as PyTorch).
  /// Steps are skipped on every overflow regardless.
  std::int32_t hysteresis = 1;
  HysteresisRefill hysteresis_refill = HysteresisRefill::kOnGrowth;
  /// Backoff never takes the scale below this when > 0 (0: no floor, as PyTorch). May be < 1.
  float min_scale = 0.0f;
  /// Growth never takes the scale above this (the default, FLT_MAX, only keeps it finite).
  float max_scale = 3.40282347e+38f;
};

/// The mutable state of the rule: the scale (float32, as PyTorch keeps it), the consecutive clean
/// steps since the last growth or backoff, and the overflows still tolerated before a backoff.
struct ScaleState {
  float scale = 65536.0f;               ///< the loss scale
  std::int32_t growth_tracker = 0;      ///< clean steps since the last growth or overflow
  std::int32_t hysteresis_tracker = 1;  ///< overflows still tolerated before a backoff
};

/// Bits telling what one update did (see next_scale_state()).
enum ScaleEvent : std::uint32_t {
  kEventOverflow = 1u << 0,         ///< found_inf was non-zero: the step was skipped
  kEventBackoff = 1u << 1,          ///< the scale was multiplied by backoff_factor
  kEventGrowth = 1u << 2,           ///< the scale was multiplied by growth_factor
  kEventReachedMin = 1u << 3,       ///< a backoff was clamped to min_scale
  kEventReachedMax = 1u << 4,       ///< a growth was clamped to max_scale (or kept finite)
  kEventOverflowAtMin = 1u << 5,    ///< an overflow while the scale already was at min_scale
};

/// One update. With the default policy, exactly torch._amp_update_scale_:
/// - `found_inf` non-zero (NaN included): growth_tracker = 0; the hysteresis counter drops by one
///   and, when it reaches 0, scale = max(float(double(scale) * backoff_factor), min_scale);
/// - otherwise a clean step: when growth_tracker + 1 == growth_interval the scale grows to
///   min(float(double(scale) * growth_factor), max_scale) unless that is non-finite, the
///   tracker resets to 0 (also when growth was suppressed) and, by default, the hysteresis
///   counter refills; else the tracker counts up (saturating at INT32_MAX instead of overflowing,
///   for growth_interval <= 0 where the scale never grows).
/// `events`, when not null, receives the ScaleEvent bits of this update.
MIXPREC_HOST_DEVICE inline ScaleState next_scale_state(ScaleState state, float found_inf,
                                                       const ScalePolicy& policy,
                                                       std::uint32_t* events = nullptr) {
  std::uint32_t ev = 0;
  if (found_inf != 0.0f) {  // NaN != 0 is true, as in PyTorch's kernels
    ev |= kEventOverflow;
    state.growth_tracker = 0;
    state.hysteresis_tracker = state.hysteresis_tracker > 0 ? state.hysteresis_tracker - 1 : 0;
    if (state.hysteresis_tracker == 0) {
      const bool has_floor = policy.min_scale > 0.0f;
      if (has_floor && state.scale <= policy.min_scale) ev |= kEventOverflowAtMin;
      float next = static_cast<float>(static_cast<double>(state.scale) * policy.backoff_factor);
      if (has_floor && next < policy.min_scale) {
        next = policy.min_scale;
        ev |= kEventReachedMin;
      }
      if (next != state.scale) ev |= kEventBackoff;
      state.scale = next;
    }
  } else {
    if (policy.hysteresis_refill == HysteresisRefill::kOnCleanStep) {
      state.hysteresis_tracker = policy.hysteresis;
    }
    const std::int64_t successful = static_cast<std::int64_t>(state.growth_tracker) + 1;
    if (successful == policy.growth_interval) {
      float grown = static_cast<float>(static_cast<double>(state.scale) * policy.growth_factor);
      if (is_nonfinite(grown)) {  // never grow to inf (PyTorch #98828)
        grown = state.scale;
        ev |= kEventReachedMax;
      } else if (grown > policy.max_scale) {
        grown = state.scale > policy.max_scale ? state.scale : policy.max_scale;
        ev |= kEventReachedMax;
      }
      if (grown > state.scale) ev |= kEventGrowth;
      state.scale = grown;
      state.growth_tracker = 0;
      state.hysteresis_tracker = policy.hysteresis;
    } else {
      state.growth_tracker =
          successful > INT32_MAX ? INT32_MAX : static_cast<std::int32_t>(successful);
    }
  }
  if (events != nullptr) *events = ev;
  return state;
}

/// The reciprocal PyTorch multiplies gradients by: computed in double, rounded to float
/// (exact for powers of two).
MIXPREC_HOST_DEVICE inline float inverse_scale(float scale) {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

/// Indices of the telemetry counters kept beside the scale (an int64 array of kNumCounters).
enum Counter : int {
  kCounterHysteresis = 0,         ///< the hysteresis tracker of ScaleState
  kCounterIterations,             ///< updates applied
  kCounterSkippedSteps,           ///< updates that saw an overflow
  kCounterGrowths,                ///< updates that grew the scale
  kCounterBackoffs,               ///< updates that backed the scale off
  kCounterConsecutiveOverflows,   ///< overflows since the last clean step
  kCounterLastOverflowIteration,  ///< iteration (0-based) of the last overflow, -1 if none
  kCounterLastEvents,             ///< ScaleEvent bits of the last update
  kNumCounters
};

/// The counters of a scaler that has not updated yet (hysteresis tracker full).
MIXPREC_HOST_DEVICE inline void init_counters(std::int64_t* counters, std::int32_t hysteresis) {
  for (int i = 0; i < kNumCounters; ++i) counters[i] = 0;
  counters[kCounterHysteresis] = hysteresis;
  counters[kCounterLastOverflowIteration] = -1;
}

/// The in-place form every backend runs (CPU directly, CUDA in a one-thread kernel): applies
/// next_scale_state() to the scale and growth tracker and, when `counters` is not null, keeps the
/// hysteresis tracker and the telemetry counters in it and appends (iteration, scale, overflow)
/// to `history` (a ring of `history_capacity` rows of 3 doubles; null or 0 for none).
MIXPREC_HOST_DEVICE inline void update_scale_state(float* scale, std::int32_t* growth_tracker,
                                                   std::int64_t* counters, double* history,
                                                   std::int64_t history_capacity,
                                                   float found_inf, const ScalePolicy& policy) {
  ScaleState state;
  state.scale = *scale;
  state.growth_tracker = *growth_tracker;
  state.hysteresis_tracker =
      counters != nullptr ? static_cast<std::int32_t>(counters[kCounterHysteresis]) : 1;
  std::uint32_t ev = 0;
  state = next_scale_state(state, found_inf, policy, &ev);
  *scale = state.scale;
  *growth_tracker = state.growth_tracker;
  if (counters == nullptr) return;
  const std::int64_t iteration = counters[kCounterIterations];
  counters[kCounterHysteresis] = state.hysteresis_tracker;
  counters[kCounterIterations] = iteration + 1;
  counters[kCounterLastEvents] = ev;
  if ((ev & kEventGrowth) != 0) ++counters[kCounterGrowths];
  if ((ev & kEventBackoff) != 0) ++counters[kCounterBackoffs];
  if ((ev & kEventOverflow) != 0) {
    ++counters[kCounterSkippedSteps];
    ++counters[kCounterConsecutiveOverflows];
    counters[kCounterLastOverflowIteration] = iteration;
  } else {
    counters[kCounterConsecutiveOverflows] = 0;
  }
  if (history != nullptr && history_capacity > 0) {
    double* row = history + 3 * (iteration % history_capacity);
    row[0] = static_cast<double>(iteration);
    row[1] = static_cast<double>(state.scale);
    row[2] = (ev & kEventOverflow) != 0 ? 1.0 : 0.0;
  }
}

}  // namespace mixprec::core
