// An independent reference of E2M1 and of the NVFP4 / MXFP4 rules for tests/core/fp4*_test.cpp,
// written from the formats' definitions and from Transformer Engine's and torchao's formulas as
// /work/shared/spec/fp4.md and docs/fp4.md state them, not from mixprec/core/fp4.h: a code's value
// from its fields, a cast as the nearest of the 8 values found by search (ties to the even code),
// the E4M3 block scale through fp8_reference.h's search cast, and the MX exponents from frexp.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/fp8_reference.h"

namespace mixprec::core::fp4_reference {

using fp8_reference::bits32;
using fp8_reference::from_bits32;

/// The value of an E2M1 code by its fields: sign, 2 exponent bits (bias 1), 1 mantissa bit;
/// exponent 0 is subnormal (mantissa * 0.5).
inline double decode(std::uint8_t code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double magnitude = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return (code & 8) != 0 ? -magnitude : magnitude;
}

/// The round-to-nearest-even, saturating cast: the nearest of the codes 0..7 to |v| (a tie to the
/// even code), |v| >= 6 and inf to 7, with v's sign bit; NaN to 0x7 (TE's kernels).
inline std::uint8_t cast(float v) {
  if (std::isnan(v)) return 0x7;
  const double a = std::fabs(static_cast<double>(v));
  std::uint8_t best = 7;
  if (a < 6.0) {
    double best_distance = std::numeric_limits<double>::infinity();
    for (std::uint8_t c = 0; c < 8; ++c) {
      const double d = std::fabs(decode(c) - a);
      if (d < best_distance || (d == best_distance && (c & 1) == 0)) {
        best = c;
        best_distance = d;
      }
    }
  }
  return static_cast<std::uint8_t>(best | (std::signbit(v) ? 8 : 0));
}

/// The E4M3 bits of a non-negative float, saturating at 448 (fp8_reference's search).
inline std::uint8_t e4m3(float v) { return fp8_reference::quantize(v, Fp8Format::kE4M3); }
inline float e4m3_value(std::uint8_t b) {
  return static_cast<float>(fp8_reference::decode(b, Fp8Format::kE4M3));
}

/// min(v, FLT_MAX) with NaN giving FLT_MAX (CUDA's fminf, as TE writes it).
inline float fmin_max(float v) {
  return std::isnan(v) ? std::numeric_limits<float>::max()
                       : std::fmin(v, std::numeric_limits<float>::max());
}

/// TE >= 2.14's NVFP4 scales, written out as reference_nvfp4.py and core_nvfp4.cuh state them.
struct TeNvfp4 {
  float s_enc, s_dec;
  explicit TeNvfp4(float amax) {
    s_enc = fmin_max(2688.0f / amax);
    if (amax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
    s_dec = 1.0f / s_enc;
  }
  /// s_b = e4m3(min(amax_b * fl(S_enc * fl(1/6)), FLT_MAX)); `old_order`: TE 2.8-2.13's
  /// e4m3(fl(fl(amax_b / 6) * S_enc)).
  std::uint8_t block_scale(float block_amax, bool old_order = false) const {
    if (old_order) return e4m3(fmin_max((block_amax / 6.0f) * s_enc));
    const float factor = s_enc * (1.0f / 6.0f);
    return e4m3(fmin_max(block_amax * factor));
  }
  float encode(std::uint8_t s_b) const { return fmin_max(1.0f / (e4m3_value(s_b) * s_dec)); }
  static float decode(std::uint8_t s_b, float amax) {
    return (e4m3_value(s_b) * amax) * (1.0f / 2688.0f);
  }
};

/// torchao's MXFP4 exponent written exactly: FLOOR = floor(log2 amax) - 2 clamped to [-127, 128]
/// (the exponent field: a subnormal amax counts as 2^-127); RCEIL = ceil(log2(fl(amax / 6)))
/// clamped to [-127, 127], with 254 for inf. NaN: 255. Biased by 127.
inline int mx_exponent(float amax, bool rceil) {
  if (std::isnan(amax)) return 255;
  if (!rceil) {
    const int e = std::isinf(amax) ? 128 : (amax < std::ldexp(1.0f, -126) ? -127 : std::ilogb(amax));
    return std::max(-127, std::min(128, e - 2)) + 127;
  }
  if (std::isinf(amax)) return 254;
  const float d = amax / 6.0f;
  if (d == 0.0f) return 0;
  int e;
  const double fraction = std::frexp(static_cast<double>(d), &e);  // d = fraction * 2^e, [0.5, 1)
  const int ceil_log2 = fraction == 0.5 ? e - 1 : e;
  return std::max(-127, std::min(127, ceil_log2)) + 127;
}

/// The factor an MX element is multiplied by, as torchao applies its scale: FLOOR divides by
/// max(2^(e-127), 2^-126), RCEIL multiplies by 2^(127-e) (1 for e = 0).
inline double mx_multiplier(int e, bool rceil) {
  if (e == 255) return std::numeric_limits<double>::quiet_NaN();
  if (rceil) return e == 0 ? 1.0 : std::ldexp(1.0, 127 - e);
  return 1.0 / std::max(std::ldexp(1.0, e - 127), std::ldexp(1.0, -126));
}

}  // namespace mixprec::core::fp4_reference
