// The delayed rule's per-tensor update as host/device code (internal): the CPU loop of
// core::delayed_scaling_update_ (src/core/kernels.cpp) and the CUDA kernel (src/cuda/fp8.cu) both
// run this one function, so the rule (core::delayed_scale) and TE's history roll live in one place.
#pragma once

#include <cstdint>

#include "mixprec/core/fp8.h"
#include "mixprec/core/macros.h"

namespace mixprec::core {

/// The larger of two amaxes, NaN when either is NaN (torch.max's rule): how the delayed rule
/// reduces a history and how the CPU kernels combine their threads' amaxes.
MIXPREC_HOST_DEVICE inline float max_nan(float a, float b) {
  if (a != a) return a;
  return (b != b || b > a) ? b : a;
}

/// The larger of two amaxes, skipping a NaN (fmaxf's rule, TE's): NaN only when both are NaN.
MIXPREC_HOST_DEVICE inline float max_skip_nan(float a, float b) {
  if (a != a) return b;
  return (b > a) ? b : a;
}

/// One tensor of the batched update, as TE's fused kernel: a tensor whose slot 0 is 0 keeps its
/// history and scale; else reduce the history, new scale and scale_inv, roll, zero slot 0 (see
/// core::delayed_scaling_update_).
MIXPREC_HOST_DEVICE inline void delayed_update_one(const DelayedTensor& t,
                                                   const DelayedScaling& rule) {
  float* h = t.amax_history;
  const std::int64_t s = t.stride;
  const std::int64_t n = rule.history_len;
  const float current = h[0];
  if (current == 0.0f) return;  // TE PR #825's fused kernel: nothing seen, nothing rolled
  float amax = current;
  if (rule.algo == AmaxAlgo::kMax) {
    const bool skip_nan = rule.nan == NanAmax::kIgnore;
    for (std::int64_t i = 1; i < n; ++i) {
      amax = skip_nan ? max_skip_nan(amax, h[i * s]) : max_nan(amax, h[i * s]);
    }
  }
  const float scale = delayed_scale(amax, *t.scale, fp8_max(t.format), rule.margin);
  *t.scale = scale;
  *t.scale_inv = 1.0f / scale;
  // TE's roll: slot i takes slot i + 1, the last slot takes slot 0; then slot 0 starts at zero.
  for (std::int64_t i = 0; i + 1 < n; ++i) h[i * s] = h[(i + 1) * s];
  if (n > 1) h[(n - 1) * s] = current;
  h[0] = 0.0f;
}

}  // namespace mixprec::core
