// The thread-count setting of the CPU kernels (core::set_num_threads / get_num_threads).
// Kept in mixprec rather than in omp_set_num_threads(), so it never changes the user's own
// OpenMP regions.
#include "cpu/threads.h"

#include <atomic>

#include "mixprec/core/error.h"
#include "mixprec/core/kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mixprec::core {
namespace {

std::atomic<int> g_num_threads{0};  // 0: OpenMP's default

}  // namespace

void set_num_threads(int n) {
  MIXPREC_CHECK(n >= 0, "set_num_threads: n must be >= 0 (0 restores the default), got ", n);
  g_num_threads.store(n, std::memory_order_relaxed);
}

int get_num_threads() { return cpu::max_threads(); }

namespace cpu {

int max_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
#ifdef _OPENMP
  const int omp = omp_get_max_threads();
  return omp > 0 ? omp : 1;
#else
  return 1;
#endif
}

}  // namespace cpu
}  // namespace mixprec::core
