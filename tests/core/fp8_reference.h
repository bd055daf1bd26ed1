// An independent reference of the FP8 formats for tests/core/fp8*_test.cpp, written from the
// formats' definitions (OCP 8-bit floating point spec; PyTorch's float8_e4m3fn / float8_e5m2), not
// from mixprec/core/fp8.h: a code's value from its sign, exponent and mantissa fields, and a cast
// as the nearest code found by searching all of them (ties to the even code), saturating.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/reference.h"
#include "cpu/fp8_simd.h"
#include "cpu/unscale_targets.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/half.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core::fp8_reference {

/// The fields of a format: E4M3 has no infinity and one NaN mantissa (S.1111.111); E5M2 is
/// IEEE-like (exponent all ones: infinity or NaN).
struct Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool ieee_specials;
};

inline Format format_of(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? Format{4, 3, 7, false} : Format{5, 2, 15, true};
}

/// The value of `code`, by definition, in double (exact).
inline double decode(std::uint8_t code, Fp8Format f) {
  const Format fmt = format_of(f);
  const bool negative = (code & 0x80) != 0;
  const int exponent = (code >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1);
  const int mantissa = code & ((1 << fmt.mantissa_bits) - 1);
  const int all_ones = (1 << fmt.exponent_bits) - 1;
  double magnitude;
  if (fmt.ieee_specials && exponent == all_ones) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (!fmt.ieee_specials && exponent == all_ones &&
             mantissa == (1 << fmt.mantissa_bits) - 1) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - fmt.bias - fmt.mantissa_bits);
  } else {
    magnitude = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -fmt.mantissa_bits),
                           exponent - fmt.bias);
  }
  return negative ? -magnitude : magnitude;
}

/// The values of the codes 0 .. 0x7f.
inline const std::array<double, 128>& positive_values(Fp8Format f) {
  static const auto make = [](Fp8Format g) {
    std::array<double, 128> out{};
    for (int c = 0; c < 128; ++c)
      out[static_cast<std::size_t>(c)] = decode(static_cast<std::uint8_t>(c), g);
    return out;
  };
  static const std::array<double, 128> e4m3 = make(Fp8Format::kE4M3);
  static const std::array<double, 128> e5m2 = make(Fp8Format::kE5M2);
  return f == Fp8Format::kE4M3 ? e4m3 : e5m2;
}

/// The largest finite positive code (0x7e for E4M3, 0x7b for E5M2), found by decoding.
inline std::uint8_t max_code(Fp8Format f) {
  const auto& v = positive_values(f);
  int best = 0;
  for (int c = 0; c < 128; ++c) {
    if (std::isfinite(v[static_cast<std::size_t>(c)]) &&
        v[static_cast<std::size_t>(c)] > v[static_cast<std::size_t>(best)])
      best = c;
  }
  return static_cast<std::uint8_t>(best);
}

/// The saturating cast of `v` (the float values PyTorch's clamp(-max, max).to(fp8) sees):
/// NaN -> the NaN code with v's sign (0x7f / 0xff); |v| >= max, infinities included, -> +-max;
/// otherwise the nearest code by exhaustive search, a tie going to the even code.
inline std::uint8_t quantize(double v, Fp8Format f) {
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return static_cast<std::uint8_t>(sign | 0x7f);
  const double a = std::fabs(v);
  const auto& values = positive_values(f);
  const std::uint8_t top = max_code(f);
  if (a >= values[top]) return static_cast<std::uint8_t>(sign | top);
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= top; ++c) {
    const double d = std::fabs(values[static_cast<std::size_t>(c)] - a);
    if (d < best_distance || (d == best_distance && c % 2 == 0)) {
      best = c;
      best_distance = d;
    }
  }
  return static_cast<std::uint8_t>(sign | best);
}

/// The bits of a float, and the float of bits (tests/core/reference.h).
using mixprec::testing::bits32;
using mixprec::testing::from_bits32;

/// Floats that exercise a cast to `f`: every code's value and its float neighbours, every
/// midpoint between adjacent codes (the ties) and its neighbours, +-0, +-max and beyond, +-inf,
/// NaNs of both signs, float subnormals and FLT_MAX, each with both signs.
inline std::vector<float> edge_floats(Fp8Format f) {
  std::vector<float> out;
  const auto& values = positive_values(f);
  const std::uint8_t top = max_code(f);
  const auto add = [&](float x) {
    for (float s : {x, -x}) {
      out.push_back(s);
      out.push_back(std::nextafter(s, std::numeric_limits<float>::infinity()));
      out.push_back(std::nextafter(s, -std::numeric_limits<float>::infinity()));
    }
  };
  for (int c = 0; c <= top; ++c) {
    add(static_cast<float>(values[static_cast<std::size_t>(c)]));
    // The midpoint to the next code (the next power of two's half-step past the top).
    const double next =
        c < top ? values[static_cast<std::size_t>(c) + 1] : 2 * values[top] - values[top - 1u];
    add(static_cast<float>((values[static_cast<std::size_t>(c)] + next) / 2));
  }
  for (float x : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  from_bits32(0x007fffffu), from_bits32(0x00400000u), 1e30f,
                  2 * static_cast<float>(values[top])}) {
    add(x);
  }
  out.push_back(from_bits32(0x7fc00000u));
  out.push_back(from_bits32(0xffc00000u));
  out.push_back(from_bits32(0x7f800001u));  // signalling NaN
  out.push_back(from_bits32(0xff812345u));
  return out;
}

// ---- Test harness: typed buffers, SIMD targets, thread counts ----------------------------------

/// n elements of `dtype` in a byte buffer, starting one element past the buffer's start (so SIMD
/// loads are unaligned), followed by 64 guard bytes.
class Typed {
 public:
  Typed(DType dtype, std::int64_t n)
      : size_(element_size(dtype)),
        bytes_(static_cast<std::size_t>(n + 1) * element_size(dtype) + 64, 0xa5) {
    view_ = {bytes_.data() + size_, n, dtype};
  }
  Typed(Typed&&) = default;  // the vector's buffer, which view_ points into, moves with it
  Typed(const Typed&) = delete;
  Typed& operator=(const Typed&) = delete;
  const TensorView& view() const { return view_; }
  std::int64_t numel() const { return view_.numel; }
  /// Stores v rounded to the dtype (via float for the 16-bit types).
  void set(std::int64_t i, double v) {
    unsigned char* p = at(i);
    switch (view_.dtype) {
      case DType::kFloat64:
        std::memcpy(p, &v, 8);
        return;
      case DType::kFloat32: {
        const float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        return;
      }
      case DType::kFloat16: {
        const std::uint16_t h = float_to_half_bits(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        return;
      }
      case DType::kBFloat16: {
        const std::uint16_t b = float_to_bf16_bits(static_cast<float>(v));
        std::memcpy(p, &b, 2);
        return;
      }
    }
  }
  /// The element's exact value.
  double value(std::int64_t i) const {
    const unsigned char* p = at(i);
    switch (view_.dtype) {
      case DType::kFloat64: {
        double d;
        std::memcpy(&d, p, 8);
        return d;
      }
      case DType::kFloat32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DType::kFloat16: {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        return half_bits_to_float(h);
      }
      case DType::kBFloat16: {
        std::uint16_t b;
        std::memcpy(&b, p, 2);
        return bf16_bits_to_float(b);
      }
    }
    return 0.0;
  }
  /// The element as the kernels read it: float(x), to nearest for float64.
  float as_float(std::int64_t i) const { return static_cast<float>(value(i)); }
  /// The element's bits (zero-extended).
  std::uint64_t bits(std::int64_t i) const {
    std::uint64_t u = 0;
    std::memcpy(&u, at(i), size_);
    return u;
  }
  /// Whether the 64 bytes after the last element still hold the fill.
  bool guard_intact() const {
    for (std::size_t k = bytes_.size() - 64; k < bytes_.size(); ++k) {
      if (bytes_[k] != 0xa5) return false;
    }
    return true;
  }

 private:
  unsigned char* at(std::int64_t i) {
    return bytes_.data() + size_ * static_cast<std::size_t>(i + 1);
  }
  const unsigned char* at(std::int64_t i) const {
    return bytes_.data() + size_ * static_cast<std::size_t>(i + 1);
  }
  std::size_t size_;
  std::vector<unsigned char> bytes_;
  TensorView view_;
};

/// The bits `Typed` stores for a float result in `dtype` (float64 widens it exactly).
inline std::uint64_t bits_in(DType dtype, float f) {
  switch (dtype) {
    case DType::kFloat64: {
      const double d = f;
      std::uint64_t u;
      std::memcpy(&u, &d, 8);
      return u;
    }
    case DType::kFloat32:
      return bits32(f);
    case DType::kFloat16:
      return float_to_half_bits(f);
    case DType::kBFloat16:
      return float_to_bf16_bits(f);
  }
  return 0;
}

inline constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                    DType::kBFloat16};
inline constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};

/// The Highway targets compiled in and supported here, read once before any is forced.
inline const std::vector<std::int64_t>& simd_targets() {
  static const std::vector<std::int64_t> targets = cpu::simd_targets();
  return targets;
}

/// Runs fn(name) through the public dispatch point: once as dispatched, then with the CPU
/// kernels forced onto each compiled SIMD target (checked to have taken effect).
template <typename Fn>
void for_each_backend(const Fn& fn) {
  fn("dispatch");
  for (std::int64_t target : simd_targets()) {
    struct Restore {
      ~Restore() { cpu::force_simd_target(0); }
    } restore;
    cpu::force_simd_target(target);
    if (cpu::fp8_dispatched_simd_target() != target) {
      ADD_FAILURE() << "could not force " << cpu::simd_target_name(target);
      continue;
    }
    fn(cpu::simd_target_name(target));
  }
}

/// Sets core::set_num_threads(n) until destroyed (then back to the default).
struct ThreadCount {
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(0); }
};

}  // namespace mixprec::core::fp8_reference
