// The FP4 kernels' per-block work as host/device code (internal): the CPU loops (src/cpu/fp4.cpp)
// and the CUDA kernels (src/cuda/fp4.cu) run these same functions on one block each, so every
// rounding and order of operations lives in one place (the rules themselves: mixprec/core/fp4.h).
#pragma once

#include <Random123/philox.h>

#include <cstdint>

#include "mixprec/core/fp4.h"
#include "mixprec/core/half.h"
#include "mixprec/core/macros.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// Element i of a float32, float64 (rounded to float32), float16 or bfloat16 buffer, as a float.
MIXPREC_HOST_DEVICE inline float load_as_float(const void* data, std::int64_t i, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DType::kFloat64:
      return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::kFloat16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kBFloat16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
  }
  return 0.0f;
}

/// Stores v, rounded to nearest even, as element i of a float32, float64, float16 or bfloat16
/// buffer.
MIXPREC_HOST_DEVICE inline void store_float(void* data, std::int64_t i, DType dtype, float v) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(data)[i] = v;
      return;
    case DType::kFloat64:
      static_cast<double*>(data)[i] = static_cast<double>(v);
      return;
    case DType::kFloat16:
      static_cast<std::uint16_t*>(data)[i] = float_to_half_bits(v);
      return;
    case DType::kBFloat16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bf16_bits(v);
      return;
  }
}

/// max |v[i]| over n floats with NaN skipped (TE's fmaxf; no libm call, so a signalling NaN is
/// skipped too): the max of the magnitude bits that are not NaN's.
MIXPREC_HOST_DEVICE inline float amax_skip_nan(const float* v, int n) {
  std::uint32_t best = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t a = float_to_bits(v[i]) & 0x7fffffffu;
    const std::uint32_t kept = a <= 0x7f800000u ? a : 0u;
    best = kept > best ? kept : best;
  }
  return bits_to_float(best);
}

/// max |v[i]| over n floats, NaN when any is NaN (torch.amax's rule, torchao's).
MIXPREC_HOST_DEVICE inline float amax_propagate(const float* v, int n) {
  std::uint32_t best = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t a = float_to_bits(v[i]) & 0x7fffffffu;
    best = a > best ? a : best;
  }
  return bits_to_float(best > 0x7f800000u ? 0x7fc00000u : best);
}

/// The 16 random bytes of element group `group` (elements 16 * group .. 16 * group + 15) of a
/// stochastic NVFP4 quantize: Philox4x32-10 (Random123) with key = seed and counter = {group,
/// offset} as 32-bit words, low word first. Byte j (element 16 * group + j) is byte j % 4 of word
/// j / 4.
MIXPREC_HOST_DEVICE inline void philox_bytes(std::uint64_t seed, std::uint64_t offset,
                                             std::uint64_t group, std::uint32_t out[4]) {
  r123::Philox4x32 philox;
  const r123::Philox4x32::ctr_type counter = {
      {static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32),
       static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)}};
  const r123::Philox4x32::key_type key = {
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
  const r123::Philox4x32::ctr_type r = philox(counter, key);
  for (int w = 0; w < 4; ++w) out[w] = r.v[w];
}

/// Random byte j (0..15) of a group from philox_bytes.
MIXPREC_HOST_DEVICE inline std::uint32_t random_byte(const std::uint32_t words[4], int j) {
  return (words[j >> 2] >> (8 * (j & 3))) & 0xffu;
}

/// Encodes 16 floats, each times `encode`, into 8 packed bytes (even element low): rounded to
/// nearest even, or stochastically with `random` (philox_bytes of their group) when not null.
MIXPREC_HOST_DEVICE inline void encode_e2m1_16(const float* v, float encode,
                                               const std::uint32_t* random, std::uint8_t* q) {
  for (int i = 0; i < 8; ++i) {
    const float lo = v[2 * i] * encode, hi = v[2 * i + 1] * encode;
    const std::uint8_t a = random == nullptr ? float_to_e2m1(lo)
                                             : float_to_e2m1_stochastic(lo, random_byte(random, 2 * i));
    const std::uint8_t b = random == nullptr
                               ? float_to_e2m1(hi)
                               : float_to_e2m1_stochastic(hi, random_byte(random, 2 * i + 1));
    q[i] = static_cast<std::uint8_t>(a | (b << 4));
  }
}

// Note [NaN bits of the FP4 kernels]
// A product or sum that is NaN has no portable bits: an x86 core returns a NaN operand quieted
// (the first of two, in whichever order the compiler put them) and makes 0xffc00000 from inf * 0
// or inf - inf, an AArch64 core makes 0x7fc00000, and a CUDA device returns 0x7fffffff for all of
// them. Dequantize makes NaN from an E8M0 scale of 255 and, under an amax of inf, from inf times a
// zero code or scale; the RHT from a NaN or +-inf in its input. decode_e2m1_16 and hadamard16
// therefore give every NaN as the one quiet NaN 0x7fc00000 (bfloat16 0x7fc0), with integer code,
// so that the CPU and CUDA kernels agree bit for bit on any machine.

/// v, or the quiet NaN 0x7fc00000 when v is any NaN (Note [NaN bits of the FP4 kernels]).
MIXPREC_HOST_DEVICE inline float quiet_nan_if_nan(float v) {
  return (float_to_bits(v) & 0x7fffffffu) > 0x7f800000u ? bits_to_float(0x7fc00000u) : v;
}

/// Decodes 8 packed bytes into 16 floats, each E2M1 value times `decode` (one rounding; a NaN
/// product as 0x7fc00000, Note [NaN bits of the FP4 kernels]).
MIXPREC_HOST_DEVICE inline void decode_e2m1_16(const std::uint8_t* q, float decode, float* v) {
  for (int i = 0; i < 8; ++i) {
    v[2 * i] = quiet_nan_if_nan(e2m1_to_float(q[i] & 0xfu) * decode);
    v[2 * i + 1] = quiet_nan_if_nan(e2m1_to_float(static_cast<std::uint8_t>(q[i] >> 4)) * decode);
  }
}

/// The RHT of one run of 16 (mixprec/core/fp4.h, hadamard16_): v is rounded to bfloat16 and
/// signed, a 4-stage float32 butterfly (Sylvester's ordering), times 1/4, rounded to bfloat16 (a
/// NaN as 0x7fc0, Note [NaN bits of the FP4 kernels]).
MIXPREC_HOST_DEVICE inline void hadamard16(const float* in, std::uint16_t* out) {
  float v[16];
  for (int i = 0; i < 16; ++i) {
    const float x = bf16_bits_to_float(float_to_bf16_bits(in[i]));
    v[i] = ((kRhtSignBits >> i) & 1u) != 0 ? -x : x;
  }
  for (int h = 1; h < 16; h *= 2) {
    for (int i = 0; i < 16; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  for (int i = 0; i < 16; ++i) out[i] = float_to_bf16_bits(quiet_nan_if_nan(v[i] * 0.25f));
}

}  // namespace mixprec::core
