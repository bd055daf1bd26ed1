// The SIMD spans of the CPU FP8 kernels (src/cpu/fp8_*simd.cpp, one copy per Highway target, the
// best one picked at run time). Internal: src/cpu/fp8.cpp cuts the tensors into spans and runs
// them on threads. Every element equals the scalar functions of mixprec/core/fp8.h bit for bit.
#pragma once

#include <cstdint>

#include "mixprec/core/fp8.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

/// max |x| over x's elements as a float, 0 when x is empty. A NaN element makes it the quiet NaN
/// 0x7fc00000 (kPropagate) or is left out (kIgnore). For float64 it is float(max |x|) (rounding is
/// monotonic).
float amax_span(const TensorView& x, NanAmax nan);

/// q[i] = float_to_fp8_bits(float(x[i]) * scale, format); returns amax_span(x, nan) when
/// `want_amax` (from the same loads, read again only for a span holding NaN under kIgnore), else 0.
float quantize_span(const TensorView& x, std::uint8_t* q, Fp8Format format, float scale,
                    bool want_amax, NanAmax nan);

/// out[i] = out.dtype(fp8_bits_to_float(q[i], format) * scale_inv), rounded to nearest even.
void dequantize_span(const std::uint8_t* q, Fp8Format format, float scale_inv,
                     const TensorView& out);

/// The MX blocks first_block .. last_block - 1 of x read as rows of `cols` (ceil(cols / 32)
/// blocks a row, numbered row by row): each block's exponent into scales[block], its elements
/// into q (core::quantize_mxfp8_, NaN elements as `nan` says). x.data and q are the whole
/// tensor's.
void quantize_mx_blocks(const TensorView& x, std::int64_t cols, std::uint8_t* q,
                        std::uint8_t* scales, Fp8Format format, NanAmax nan,
                        std::int64_t first_block, std::int64_t last_block);

/// core::dequantize_mxfp8_ of the blocks first_block .. last_block - 1 (out: the whole tensor).
void dequantize_mx_blocks(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                          Fp8Format format, const TensorView& out, std::int64_t first_block,
                          std::int64_t last_block);

/// core::quantize_fp8_tiles_ of the bands first_band .. last_band - 1 (band i: the tile_rows rows
/// of the i-th row of tiles; x, q: the whole tensor's).
void quantize_tiles(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                    std::int64_t tile_cols, std::uint8_t* q, float* scale_inv, Fp8Format format,
                    const CurrentScaling& rule, std::int64_t first_band, std::int64_t last_band);

/// core::dequantize_fp8_tiles_ of the tiles first_tile .. last_tile - 1 (out: the whole tensor).
void dequantize_tiles(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                      std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                      const TensorView& out, std::int64_t first_tile, std::int64_t last_tile);

/// The Highway target the FP8 spans run on now; cpu::force_simd_target()
/// (src/cpu/unscale_targets.h) forces it, as it forces the unscale kernel's.
std::int64_t fp8_dispatched_simd_target();

}  // namespace mixprec::core::cpu
