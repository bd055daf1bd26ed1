// The SIMD kernel of unscale-and-check (src/cpu/unscale_simd.cpp, one copy per Highway target)
// and the hooks the conformance suite uses to run every compiled target. Internal; no Highway
// types show through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

/// Unscales and checks `count` views one after the other on the calling thread, with the best
/// SIMD target this CPU supports (or the one forced by force_simd_target()). Returns whether any
/// element was non-finite; writes nothing when `inv_scale == 1`. Arguments already validated.
bool unscale_views(const TensorView* views, std::size_t count, float inv_scale);

/// The Highway targets compiled into this binary that this CPU supports, best first, as
/// Highway's target bits (HWY_AVX3, HWY_AVX2, ..., HWY_EMU128).
std::vector<std::int64_t> simd_targets();

/// A short name of a target from simd_targets() ("AVX3", "SSE4", "EMU128", ...).
const char* simd_target_name(std::int64_t target);

/// Makes unscale_views() use `target` (one of simd_targets()) until called again; 0 restores
/// the normal choice. Process-wide: for tests, never while a kernel runs on another thread.
void force_simd_target(std::int64_t target);

/// The target unscale_views() would run on now (to check that force_simd_target() took effect).
std::int64_t dispatched_simd_target();

}  // namespace mixprec::core::cpu
