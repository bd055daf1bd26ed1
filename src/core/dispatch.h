// Internal to mixprec::core's dispatch files (src/core/kernels.cpp, kernels_fp8.cpp).
#pragma once

namespace mixprec::core::detail {

#ifndef MIXPREC_WITH_CUDA
/// Throws core::Error for CUDA buffers given to a build without CUDA kernels, naming `who` and
/// how to build them.
[[noreturn]] void throw_no_cuda(const char* who);
#endif

}  // namespace mixprec::core::detail
