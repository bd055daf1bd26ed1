// Scalar references for the kernel tests, written independently of the code under test:
// binary16 through the compiler's own half type, bfloat16 by a nearest-neighbour search in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mixprec/core/scale_policy.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::testing {

// The compiler's own binary16 type: _Float16 (GCC >= 12, clang >= 15 on x86-64), or clang's
// storage-only __fp16 on older clang (its conversions round to nearest even too).
#if defined(__clang__) && __clang_major__ < 15
using CompilerHalf = __fp16;
#else
using CompilerHalf = _Float16;
#endif

inline std::uint32_t bits32(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::uint64_t bits64(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
inline double from_bits64(std::uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
inline double half_to_double(std::uint16_t u) {
  CompilerHalf h;
  std::memcpy(&h, &u, 2);
  return static_cast<double>(h);
}
inline std::uint16_t float_to_half_ref(float f) {
  const CompilerHalf h = static_cast<CompilerHalf>(f);
  std::uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline double bf16_to_double(std::uint16_t u) {
  return static_cast<double>(from_bits32(static_cast<std::uint32_t>(u) << 16));
}
// Nearest bfloat16 (ties to even) of a non-NaN float, inf beyond the rounding limit.
inline std::uint16_t float_to_bf16_ref(float f) {
  const std::uint32_t x = bits32(f);
  if (std::isinf(f)) return static_cast<std::uint16_t>(x >> 16);
  const auto low = static_cast<std::uint16_t>(x >> 16);
  const auto high = static_cast<std::uint16_t>(low + 1);
  const bool high_is_inf = (high & 0x7fffu) == 0x7f80u;
  const double sign = std::signbit(f) ? -1.0 : 1.0;
  const double high_value = high_is_inf ? sign * std::ldexp(1.0, 128) : bf16_to_double(high);
  const double d = f;
  const double dl = std::fabs(d - bf16_to_double(low));
  const double dh = std::fabs(d - high_value);
  if (dl < dh) return low;
  if (dh < dl) return high;
  return (low & 1u) == 0 ? low : high;
}

// Stored bits of one element, widened to 64 bits for comparison.
inline bool reference_nonfinite(core::DType dtype, std::uint64_t bits) {
  switch (dtype) {
    case core::DType::kFloat32: return !std::isfinite(from_bits32(static_cast<std::uint32_t>(bits)));
    case core::DType::kFloat64: return !std::isfinite(from_bits64(bits));
    case core::DType::kFloat16: return !std::isfinite(half_to_double(static_cast<std::uint16_t>(bits)));
    case core::DType::kBFloat16: return !std::isfinite(bf16_to_double(static_cast<std::uint16_t>(bits)));
  }
  return false;
}

inline bool reference_isnan(core::DType dtype, std::uint64_t bits) {
  switch (dtype) {
    case core::DType::kFloat32: return std::isnan(from_bits32(static_cast<std::uint32_t>(bits)));
    case core::DType::kFloat64: return std::isnan(from_bits64(bits));
    case core::DType::kFloat16: return std::isnan(half_to_double(static_cast<std::uint16_t>(bits)));
    case core::DType::kBFloat16: return std::isnan(bf16_to_double(static_cast<std::uint16_t>(bits)));
  }
  return false;
}

// The bits an element must hold after unscaling by inv_scale, computed in double: reduced
// types compute in float (so the double product is rounded to float first), fp64 in double.
inline std::uint64_t reference_unscaled(core::DType dtype, std::uint64_t bits, float inv_scale) {
  if (inv_scale == 1.0f) return bits;
  const double inv = inv_scale;
  switch (dtype) {
    case core::DType::kFloat32:
      return bits32(static_cast<float>(from_bits32(static_cast<std::uint32_t>(bits)) * inv));
    case core::DType::kFloat64:
      return bits64(from_bits64(bits) * inv);
    case core::DType::kFloat16:
      return float_to_half_ref(static_cast<float>(half_to_double(static_cast<std::uint16_t>(bits)) * inv));
    case core::DType::kBFloat16: {
      const float r = static_cast<float>(bf16_to_double(static_cast<std::uint16_t>(bits)) * inv);
      if (std::isnan(r)) return 0x7fc0u;
      return float_to_bf16_ref(r);
    }
  }
  return bits;
}

// An independent model of the update rule with its extensions, written as Megatron-LM and DeepSpeed
// describe theirs, in double (rounding to float where PyTorch keeps a float32 scale).
struct ReferenceScaleModel {
  double scale;
  long tracker = 0;
  long hysteresis_left;

  void step(bool overflow, const core::ScalePolicy& p) {
    if (overflow) {
      tracker = 0;
      if (hysteresis_left > 0) --hysteresis_left;
      if (hysteresis_left == 0) {
        double next = static_cast<float>(scale * p.backoff_factor);
        if (p.min_scale > 0 && next < p.min_scale) next = p.min_scale;
        scale = next;
      }
      return;
    }
    if (p.hysteresis_refill == core::HysteresisRefill::kOnCleanStep) hysteresis_left = p.hysteresis;
    if (++tracker == p.growth_interval) {
      const double grown = static_cast<float>(scale * p.growth_factor);
      if (std::isfinite(grown)) scale = grown > p.max_scale ? std::fmax(scale, p.max_scale) : grown;
      tracker = 0;
      hysteresis_left = p.hysteresis;
    }
  }
};

}  // namespace mixprec::testing
