// Bit-exact conversions between float and the 16-bit formats (IEEE binary16, bfloat16),
// and finiteness tests on the exponent bits. Host/device; no LibTorch, no intrinsics.
// Rounding is round-to-nearest-even, as c10::Half and c10::BFloat16 do.
#pragma once

#include <cstdint>

#include "mixprec/core/macros.h"

namespace mixprec::core {

/// The bits of a float.
MIXPREC_HOST_DEVICE inline std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}

/// The float with these bits.
MIXPREC_HOST_DEVICE inline float bits_to_float(std::uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
}

/// The bits of a double.
MIXPREC_HOST_DEVICE inline std::uint64_t double_to_bits(double d) {
  std::uint64_t u;
  __builtin_memcpy(&u, &d, sizeof(u));
  return u;
}

/// True when the float's exponent bits are all ones (inf or NaN). Works under any
/// floating-point flags because it never compares floats.
MIXPREC_HOST_DEVICE inline bool is_nonfinite(float f) {
  return (float_to_bits(f) & 0x7f800000u) == 0x7f800000u;
}
/// As above, for a double.
MIXPREC_HOST_DEVICE inline bool is_nonfinite(double d) {
  return (double_to_bits(d) & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}
/// As above, for binary16 bits.
MIXPREC_HOST_DEVICE inline bool half_bits_nonfinite(std::uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u;
}
/// As above, for bfloat16 bits.
MIXPREC_HOST_DEVICE inline bool bf16_bits_nonfinite(std::uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u;
}

/// Widens binary16 bits to float, exactly (NaN payloads are kept).
MIXPREC_HOST_DEVICE inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return bits_to_float(sign | float_to_bits(magnitude));
  }
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// Rounds a float to binary16 bits, to nearest even; overflow gives inf, NaN stays a quiet NaN.
MIXPREC_HOST_DEVICE inline std::uint16_t float_to_half_bits(float f) {
  std::uint32_t x = float_to_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  std::uint32_t out;
  if (x >= 0x7f800000u) {
    out = x > 0x7f800000u ? (0x7e00u | ((x >> 13) & 0x3ffu)) : 0x7c00u;
  } else if (x >= 0x477ff000u) {  // >= 65520: rounds to infinity
    out = 0x7c00u;
  } else if (x < 0x38800000u) {  // below 2^-14: the result is subnormal or zero
    // Adding 0.5 puts the value's units of 2^-24 into the low mantissa bits, rounded by the FPU
    // to nearest even (the default mode, which mixprec never changes).
    const float shifted = bits_to_float(x) + 0.5f;
    out = float_to_bits(shifted) - 0x3f000000u;
  } else {
    const std::uint32_t odd = (x >> 13) & 1u;
    x += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    out = x >> 13;
  }
  return static_cast<std::uint16_t>(sign | out);
}

/// Widens bfloat16 bits to float, exactly.
MIXPREC_HOST_DEVICE inline float bf16_bits_to_float(std::uint16_t b) {
  return bits_to_float(static_cast<std::uint32_t>(b) << 16);
}

/// Rounds a float to bfloat16 bits, to nearest even; NaN stays a quiet NaN with its sign.
MIXPREC_HOST_DEVICE inline std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  const std::uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding_bias) >> 16);
}

}  // namespace mixprec::core
