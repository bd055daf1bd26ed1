// CPU backend of the FP8 kernels (internal; called only from src/core/kernels_fp8.cpp, which has
// validated the arguments). OpenMP threads over pieces of the tensor, Highway SIMD inside each
// piece (src/cpu/fp8_simd.cpp); results never depend on the thread count or the SIMD target.
#pragma once

#include <cstdint>

#include "mixprec/core/fp8.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

/// *amax = max(*amax, max |x|), NaN elements as `nan` says (core::amax_).
void amax(const TensorView& x, float* amax, NanAmax nan);

/// q = float_to_fp8_bits(float(x) * scale); when amax is not null, also *amax = max(*amax, max|x|)
/// with NaN elements as `nan` says.
void quantize_fp8(const TensorView& x, std::uint8_t* q, Fp8Format format, float scale,
                  float* amax, NanAmax nan);

/// out = out.dtype(fp8_bits_to_float(q) * scale_inv).
void dequantize_fp8(const std::uint8_t* q, Fp8Format format, float scale_inv,
                    const TensorView& out);

/// core::quantize_mxfp8_ on the CPU.
void quantize_mxfp8(const TensorView& x, std::int64_t cols, std::uint8_t* q,
                    std::uint8_t* scales, Fp8Format format, NanAmax nan);

/// core::dequantize_mxfp8_ on the CPU.
void dequantize_mxfp8(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                      Fp8Format format, const TensorView& out);

/// core::quantize_fp8_tiles_ on the CPU.
void quantize_fp8_tiles(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                        std::int64_t tile_cols, std::uint8_t* q, float* scale_inv,
                        Fp8Format format, const CurrentScaling& rule);

/// core::dequantize_fp8_tiles_ on the CPU.
void dequantize_fp8_tiles(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                          std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                          const TensorView& out);

}  // namespace mixprec::core::cpu
