// How many threads the CPU kernels use (internal): the setting of core::set_num_threads(),
// resolved against OpenMP's default. The kernels read it once per call.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mixprec::core::cpu {

/// The thread count a kernel call may use now, always >= 1.
int max_threads();

/// The streaming kernels (unscale, FP8 casts) cut their work into tasks of about this many bytes,
/// each thread taking one contiguous run of them: Note [Chunking across tensors] in unscale.cpp.
inline constexpr std::int64_t kTaskBytes = 128 * 1024;
/// Below this much work per thread, waking threads costs more than it saves.
inline constexpr std::int64_t kMinBytesPerThread = 512 * 1024;

/// Threads for `bytes` of streaming work: max_threads(), fewer for small work (0 or 1: run on
/// the calling thread).
inline int threads_for_bytes(std::int64_t bytes) {
  return static_cast<int>(std::min<std::int64_t>(max_threads(), bytes / kMinBytesPerThread));
}

}  // namespace mixprec::core::cpu
