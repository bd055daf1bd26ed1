// The SIMD loops of the CPU FP4 casts (internal; src/cpu/fp4_simd.cpp, Highway with run-time
// dispatch): blocks first .. last - 1 of x, numbered from x's first element. fp4.cpp cuts the work
// among threads; each loop gives the bits of the portable per-block code of core/fp4_ops.h.
#pragma once

#include <cstdint>

#include "mixprec/core/fp4.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

/// NVFP4 1D, round to nearest even: block_scales[b] and the 8 bytes of codes of each block of 16.
void quantize_nvfp4_blocks(const TensorView& x, float encode_scale, std::uint8_t* q,
                           std::uint8_t* block_scales, std::int64_t first_block,
                           std::int64_t last_block);

/// MXFP4: scales[b] and the 16 bytes of codes of each block of 32.
void quantize_mxfp4_blocks(const TensorView& x, MxScaleMode mode, std::uint8_t* q,
                           std::uint8_t* scales, std::int64_t first_block, std::int64_t last_block);

}  // namespace mixprec::core::cpu
