// The two AMP kernels of the core, on raw views: unscale-and-check, and the scale update.
// These functions are mixprec's one kernel dispatch point: they validate the arguments and pick
// the backend (CPU today; CUDA when built with MIXPREC_WITH_CUDA) by the views' device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mixprec/core/scale_policy.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// Multiplies every element of every view in place by `*inv_scale` and sets `*found_inf` to 1.0
/// when any element is +inf, -inf or NaN; it never clears `*found_inf`. The semantics are those of
/// torch._amp_foreach_non_finite_check_and_unscale_:
/// - finiteness is tested on the value as stored, before the multiply, on its exponent bits;
/// - every element is multiplied, also after a non-finite one was found (no early exit);
/// - fp16/bf16 are computed in float and rounded to nearest even; fp64 in double;
/// - when `*inv_scale == 1.0f` nothing is written: values pass through bit for bit.
/// Views of different dtypes may be mixed in one call; all must be on one device, where
/// `found_inf` and `inv_scale` (one float each) live too. `stream` is a cudaStream_t for CUDA
/// views (nullptr: the default stream) and is ignored on the CPU.
///
/// **Example**
/// ```cpp
/// float found_inf = 0.0f, inv_scale = 1.0f / 1024.0f;
/// mixprec::core::non_finite_check_and_unscale_({{grad.data(), n}}, &found_inf, &inv_scale);
/// ```
void non_finite_check_and_unscale_(const TensorView* grads, std::size_t count, float* found_inf,
                                   const float* inv_scale, void* stream = nullptr);

/// The same, for a vector of views.
inline void non_finite_check_and_unscale_(const std::vector<TensorView>& grads, float* found_inf,
                                          const float* inv_scale, void* stream = nullptr) {
  non_finite_check_and_unscale_(grads.data(), grads.size(), found_inf, inv_scale, stream);
}

/// Applies update_scale_state() in place to a scale and growth tracker that live on `device`
/// (for CUDA: a one-thread kernel on `stream`, no host synchronisation). `found_inf` is read on
/// the same device. With the default policy and no counters, the semantics are those of
/// torch._amp_update_scale_. `counters` (kNumCounters int64, see scale_policy.h) and `history`
/// (history_capacity rows of 3 doubles) are optional and live on the same device.
void update_scale_(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                   const ScalePolicy& policy, Device device = {}, void* stream = nullptr,
                   std::int64_t* counters = nullptr, double* history = nullptr,
                   std::int64_t history_capacity = 0);

/// True when this build of mixprec has its CUDA kernels.
bool cuda_kernels_built();

/// Sets how many threads the CPU kernels may use: `n` > 0 caps them at `n`, 0 restores the
/// default (OpenMP's, i.e. OMP_NUM_THREADS or the number of cores). Small calls run on one thread
/// whatever the setting, and results never depend on it. Throws mixprec::core::Error if `n` < 0.
///
/// **Example**
/// ```cpp
/// mixprec::core::set_num_threads(4);  // at most 4 threads per kernel call from now on
/// ```
void set_num_threads(int n);

/// The most threads a CPU kernel call will use now: the value given to set_num_threads(), or
/// OpenMP's default when that is 0 (1 when mixprec was built without OpenMP).
int get_num_threads();

}  // namespace mixprec::core
