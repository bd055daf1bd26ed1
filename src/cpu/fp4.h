// CPU FP4 kernels (internal): called by the dispatch point (src/core/kernels_fp4.cpp) after its
// checks, with host pointers. See mixprec/core/fp4.h for what each computes.
#pragma once

#include <cstdint>

#include "mixprec/core/fp4.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

void quantize_nvfp4(const TensorView& x, std::int64_t cols, float amax, std::uint8_t* q,
                    std::uint8_t* block_scales, const Nvfp4Options& options);

void dequantize_nvfp4(const std::uint8_t* q, const std::uint8_t* block_scales, float amax,
                      std::int64_t cols, const TensorView& out);

void quantize_mxfp4(const TensorView& x, std::uint8_t* q, std::uint8_t* scales, MxScaleMode mode);

void dequantize_mxfp4(const std::uint8_t* q, const std::uint8_t* scales, const TensorView& out);

void hadamard16(const TensorView& x, std::uint16_t* out);

}  // namespace mixprec::core::cpu
