// CPU unscale-and-check: cuts the views into pieces, runs them on OpenMP threads and ORs the
// workers' found flags after the join. The per-element SIMD work is in unscale_simd.cpp; it must
// keep passing tests/core/unscale_conformance_test.cpp for every target and thread count.
#include "cpu/unscale.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/threads.h"
#include "cpu/unscale_targets.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

namespace mixprec::core::cpu {
namespace {

// Note [Chunking across tensors]
// The work is a flat list of pieces (a whole view, or a slice of a large one), grouped into
// tasks of about kTaskBytes, and each thread takes one contiguous run of tasks (OpenMP's static
// schedule), as the in-place scale loop and PyTorch's parallel_for share out memory. The cost
// thus depends on the bytes, not on how they are cut into tensors: 4096 tensors of 16K elements
// are shared out like one tensor of 64M. Static beat dynamic hand-out (one task at a time) in
// paired runs of bench/unscale_benchmark on LibTorch 2.6's machine, e.g. 9.6 against 11.1 ms for
// 1 x 64M fp32 and 7.0 against 8.6 ms for 4096 x 16K. Each element is computed the same way
// whichever thread takes it and the per-thread found flags are OR-ed after the join, so results
// do not depend on the thread count. kTaskBytes and kMinBytesPerThread are in cpu/threads.h
// (the FP8 casts share them).

std::int64_t bytes_of(const TensorView& view) {
  return view.numel * static_cast<std::int64_t>(element_size(view.dtype));
}

#ifdef _OPENMP
bool unscale_parallel(const TensorView* grads, std::size_t count, float inv_scale, int threads) {
  std::vector<TensorView> pieces;
  std::vector<std::size_t> task_starts{0};
  std::int64_t task_bytes = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const TensorView& g = grads[i];
    const auto size = static_cast<std::int64_t>(element_size(g.dtype));
    const std::int64_t per_piece = kTaskBytes / size;  // a multiple of every SIMD width
    for (std::int64_t begin = 0; begin < g.numel; begin += per_piece) {
      const std::int64_t n = std::min(per_piece, g.numel - begin);
      pieces.push_back({static_cast<unsigned char*>(g.data) + begin * size, n, g.dtype, g.device});
      task_bytes += n * size;
      if (task_bytes >= kTaskBytes) {
        task_starts.push_back(pieces.size());
        task_bytes = 0;
      }
    }
  }
  if (task_starts.back() != pieces.size()) task_starts.push_back(pieces.size());
  const auto num_tasks = static_cast<std::int64_t>(task_starts.size()) - 1;

  std::vector<unsigned char> found(static_cast<std::size_t>(threads), 0);
#pragma omp parallel num_threads(threads)
  {
    bool mine = false;  // this worker's flag: no shared writes inside the loop
#pragma omp for schedule(static) nowait
    for (std::int64_t t = 0; t < num_tasks; ++t) {
      const std::size_t first = task_starts[static_cast<std::size_t>(t)];
      const std::size_t last = task_starts[static_cast<std::size_t>(t) + 1];
      mine |= unscale_views(pieces.data() + first, last - first, inv_scale);
    }
    found[static_cast<std::size_t>(omp_get_thread_num())] = mine ? 1 : 0;
  }
  return std::any_of(found.begin(), found.end(), [](unsigned char f) { return f != 0; });
}
#endif

}  // namespace

void non_finite_check_and_unscale(const TensorView* grads, std::size_t count, float* found_inf,
                                  float inv_scale) {
  std::int64_t total_bytes = 0;
  for (std::size_t i = 0; i < count; ++i) total_bytes += bytes_of(grads[i]);
  const std::int64_t threads = threads_for_bytes(total_bytes);
  bool found;
#ifdef _OPENMP
  if (threads > 1) {
    found = unscale_parallel(grads, count, inv_scale, static_cast<int>(threads));
  } else {
    found = unscale_views(grads, count, inv_scale);  // small work: no OpenMP at all
  }
#else
  (void)threads;
  found = unscale_views(grads, count, inv_scale);
#endif
  if (found) *found_inf = 1.0f;
}

}  // namespace mixprec::core::cpu
