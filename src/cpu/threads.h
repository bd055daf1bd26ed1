// How many threads the CPU kernels use (internal): the setting of core::set_num_threads(),
// resolved against OpenMP's default. The kernels read it once per call.
#pragma once

namespace mixprec::core::cpu {

/// The thread count a kernel call may use now, always >= 1.
int max_threads();

}  // namespace mixprec::core::cpu
