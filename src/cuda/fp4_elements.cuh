// The per-thread work of the CUDA FP4 kernels (internal; src/cuda/fp4.cu) as host/device code, so
// that tests/cuda/fp4_element_test.cpp runs it on the host, emulated thread by emulated thread,
// without a GPU. A thread does one block (16 or 32 elements, or one row of a 16 x 16 tile) with
// core/fp4_ops.h's functions, the ones the CPU kernels (src/cpu/fp4.cpp) call on that block, so
// each block gets the CPU's bits; loads and stores are fp8_elements.cuh's, a CPU's conversions.
#pragma once

#include <cstdint>

#include "core/fp4_ops.h"
#include "cuda/fp8_elements.cuh"  // Fp8Io
#include "mixprec/core/fp4.h"
#include "mixprec/core/macros.h"

namespace mixprec::core::cuda {

template <DType kType>
using Fp4Storage = typename Fp8Io<kType>::Storage;

/// The per-tensor scales of an NVFP4 quantize from the tensor's amax: S_enc, and S_dec = 1 / S_enc
/// as the CPU kernel computes it.
struct Nvfp4TensorScales {
  float encode;
  float decode;
};
MIXPREC_HOST_DEVICE inline Nvfp4TensorScales nvfp4_tensor_scales(float amax) {
  const float encode = nvfp4_encode_scale(amax);
  return {encode, 1.0f / encode};
}

/// Elements first .. first + kN - 1 of x as floats (the CPU kernels' conversions, NaNs included).
template <DType kType, int kN>
MIXPREC_HOST_DEVICE void fp4_load(const Fp4Storage<kType>* x, std::int64_t first, float* v) {
  for (int i = 0; i < kN; ++i) v[i] = Fp8Io<kType>::load(x[first + i]);
}

/// Stores kN floats as elements first .. first + kN - 1 of out, rounded to nearest even.
template <DType kType, int kN>
MIXPREC_HOST_DEVICE void fp4_store(const float* v, std::int64_t first, Fp4Storage<kType>* out) {
  for (int i = 0; i < kN; ++i) out[first + i] = Fp8Io<kType>::store(v[i]);
}

/// The codes of NVFP4 block b (elements 16b .. 16b + 15, loaded in v) with its scale byte: the
/// CPU kernel's encode_block, random bytes of group b when stochastic.
MIXPREC_HOST_DEVICE inline void nvfp4_encode_block(const float* v, std::int64_t b,
                                                   std::uint8_t block_scale, float decode_scale,
                                                   const Nvfp4Options& options, std::uint8_t* q) {
  const float encode = nvfp4_block_encode(block_scale, decode_scale);
  if (!options.stochastic) {
    encode_e2m1_16(v, encode, nullptr, q + b * 8);
    return;
  }
  // Two calls rather than one with `stochastic ? random : nullptr`: the words stay in registers
  // (a pointer that may be null kept them in local memory).
  std::uint32_t random[4];
  philox_bytes(options.seed, options.offset, static_cast<std::uint64_t>(b), random);
  encode_e2m1_16(v, encode, random, q + b * 8);
}

/// 1D NVFP4 quantize, the thread of block b: its amax with NaN skipped, its E4M3 scale, its codes.
template <DType kType>
MIXPREC_HOST_DEVICE void nvfp4_quantize_block(const Fp4Storage<kType>* x, std::int64_t b,
                                              Nvfp4TensorScales scales, const Nvfp4Options& options,
                                              std::uint8_t* q, std::uint8_t* block_scales) {
  float v[16];
  fp4_load<kType, 16>(x, b * 16, v);
  const std::uint8_t s = nvfp4_block_scale(amax_skip_nan(v, 16), scales.encode);
  block_scales[b] = s;
  nvfp4_encode_block(v, b, s, scales.decode, options, q);
}

// ---- 2D NVFP4: 16 consecutive threads per 16 x 16 tile, one row of it each
// -----------------------

/// The block (row * blocks_per_row + column block) that thread `unit` of a 2D quantize takes:
/// units 16t .. 16t + 15 are the 16 rows of tile t, the tiles numbered row-major (bands of 16 rows,
/// blocks_per_row tiles a band), so that a tile's threads are one half-warp.
MIXPREC_HOST_DEVICE inline std::int64_t nvfp4_tile_block(std::int64_t unit,
                                                         std::int64_t blocks_per_row) {
  const std::int64_t tile = unit / 16, band = tile / blocks_per_row;
  const std::int64_t j = tile - band * blocks_per_row;
  return (band * 16 + unit % 16) * blocks_per_row + j;
}

/// The larger of two block amaxes (neither NaN nor negative), as the CPU kernel's tile loop takes
/// it; the order of the tile's rows does not change the result.
MIXPREC_HOST_DEVICE inline float nvfp4_tile_max(float a, float b) { return b > a ? b : a; }

/// 2D NVFP4 quantize, the thread of block b (loaded in v) once its tile's amax is known: the
/// tile's scale (each row stores it) and the row's codes.
MIXPREC_HOST_DEVICE inline void nvfp4_quantize_tile_row(const float* v, std::int64_t b,
                                                        float tile_amax, Nvfp4TensorScales scales,
                                                        const Nvfp4Options& options,
                                                        std::uint8_t* q,
                                                        std::uint8_t* block_scales) {
  const std::uint8_t s = nvfp4_block_scale(tile_amax, scales.encode);
  block_scales[b] = s;
  nvfp4_encode_block(v, b, s, scales.decode, options, q);
}

/// NVFP4 dequantize, the thread of block b (1D and 2D alike: one scale byte a row and block).
template <DType kType>
MIXPREC_HOST_DEVICE void nvfp4_dequantize_block(const std::uint8_t* q,
                                                const std::uint8_t* block_scales, float amax,
                                                std::int64_t b, Fp4Storage<kType>* out) {
  float v[16];
  decode_e2m1_16(q + b * 8, nvfp4_block_decode(block_scales[b], amax), v);
  fp4_store<kType, 16>(v, b * 16, out);
}

// ---- MXFP4 and the RHT
// ----------------------------------------------------------------------------

/// MXFP4 quantize, the thread of block b (elements 32b .. 32b + 31): amax with NaN propagating,
/// the E8M0 exponent, 16 bytes of codes.
template <DType kType>
MIXPREC_HOST_DEVICE void mxfp4_quantize_block(const Fp4Storage<kType>* x, std::int64_t b,
                                              MxScaleMode mode, std::uint8_t* q,
                                              std::uint8_t* scales) {
  float v[32];
  fp4_load<kType, 32>(x, b * 32, v);
  const std::uint8_t e = mxfp4_block_exponent(amax_propagate(v, 32), mode);
  scales[b] = e;
  const float multiplier = mxfp4_element_multiplier(e, mode);
  encode_e2m1_16(v, multiplier, nullptr, q + b * 16);
  encode_e2m1_16(v + 16, multiplier, nullptr, q + b * 16 + 8);
}

/// MXFP4 dequantize, the thread of block b.
template <DType kType>
MIXPREC_HOST_DEVICE void mxfp4_dequantize_block(const std::uint8_t* q, const std::uint8_t* scales,
                                                std::int64_t b, Fp4Storage<kType>* out) {
  float v[32];
  const float decode = e8m0_to_float(scales[b]);
  decode_e2m1_16(q + b * 16, decode, v);
  decode_e2m1_16(q + b * 16 + 8, decode, v + 16);
  fp4_store<kType, 32>(v, b * 32, out);
}

/// The RHT, the thread of run g (elements 16g .. 16g + 15).
template <DType kType>
MIXPREC_HOST_DEVICE void hadamard16_run(const Fp4Storage<kType>* x, std::int64_t g,
                                        std::uint16_t* out) {
  float v[16];
  fp4_load<kType, 16>(x, g * 16, v);
  core::hadamard16(v, out + g * 16);  // qualified: cuda::hadamard16 is the launcher
}

}  // namespace mixprec::core::cuda
