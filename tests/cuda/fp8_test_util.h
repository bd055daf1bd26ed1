// Helpers of the CUDA FP8 tests (tests/cuda/fp8_element_test.cpp, cuda_fp8_test.cpp): references
// written from the format definitions (a code's value in double, the nearest-even cast by search),
// host tensors of every input dtype with values of every kind, and the CUDA kernels' threads
// emulated on the host with the kernels' own per-thread code (src/cuda/fp8_elements.cuh).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/reference.h"
#include "cuda/fp8_elements.cuh"
#include "mixprec/core/fp8.h"

namespace mixprec::core::cuda {

using testing::bits32;
using testing::bits64;
using testing::from_bits32;
using testing::from_bits64;

inline constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};

// ---- References, from the format definitions -----------------------------------------------

// The value of an FP8 code (OCP FP8: E4M3 bias 7 with only S.1111.111 NaN, E5M2 bias 15 IEEE-like).
inline double ref_fp8_value(std::uint8_t code, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const double sign = (code & 0x80) != 0 ? -1.0 : 1.0;
  const int exponent = (code & 0x7f) >> mbits, mantissa = code & ((1 << mbits) - 1);
  if (e4m3 && (code & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3 && exponent == 31) {
    return mantissa == 0 ? sign * HUGE_VAL : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - mbits);
  return sign * std::ldexp(1.0 + std::ldexp(mantissa, -mbits), exponent - bias);
}

inline std::vector<double> codes_values(Fp8Format format) {
  std::vector<double> v(256);
  for (int c = 0; c < 256; ++c)
    v[static_cast<std::size_t>(c)] = ref_fp8_value(static_cast<std::uint8_t>(c), format);
  return v;
}

// The saturating nearest-even cast of a float (fp8.h's contract): NaN to 0x7f with the sign,
// |v| >= the largest finite to it, else the nearest code by search, ties to the even code.
inline std::uint8_t ref_quantize(float v, Fp8Format format) {
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return static_cast<std::uint8_t>(sign | 0x7f);
  const std::uint8_t max_code = format == Fp8Format::kE4M3 ? 0x7e : 0x7b;
  const double a = std::fabs(static_cast<double>(v));
  if (a >= ref_fp8_value(max_code, format)) return static_cast<std::uint8_t>(sign | max_code);
  static const std::vector<double> values[2] = {codes_values(Fp8Format::kE4M3),
                                                codes_values(Fp8Format::kE5M2)};
  const std::vector<double>& value = values[format == Fp8Format::kE4M3 ? 0 : 1];
  int best = 0;
  for (int c = 1; c <= max_code; ++c) {
    const double d = std::fabs(a - value[static_cast<std::size_t>(c)]);
    const double best_d = std::fabs(a - value[static_cast<std::size_t>(best)]);
    if (d < best_d || (d == best_d && c % 2 == 0)) best = c;
  }
  return static_cast<std::uint8_t>(sign | best);
}

// The float product of two floats (double's 53 bits make the double-then-float rounding exact).
inline float ref_mul(float a, float b) {
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
}

// An element's stored bits, widened, and its value as float (NaN-preserving for the test's use).
struct Tensor {
  DType dtype;
  std::vector<unsigned char> bytes;
  std::int64_t n;
  void* data() { return bytes.data(); }
  std::uint64_t bits(std::int64_t i) const {
    std::uint64_t b = 0;
    std::memcpy(&b, bytes.data() + i * element_size(dtype), element_size(dtype));
    return b;
  }
  // float(x[i]) as a CPU converts (round to nearest even), by the test's own means.
  float value(std::int64_t i) const {
    const std::uint64_t b = bits(i);
    switch (dtype) {
      case DType::kFloat32:
        return from_bits32(static_cast<std::uint32_t>(b));
      case DType::kFloat64:
        return static_cast<float>(from_bits64(b));
      case DType::kFloat16:
        return static_cast<float>(testing::half_to_double(static_cast<std::uint16_t>(b)));
      case DType::kBFloat16:
        return static_cast<float>(testing::bf16_to_double(static_cast<std::uint16_t>(b)));
    }
    return 0.0f;
  }
};

// Values of every kind: mostly in FP8's range at several magnitudes (so that scales move them
// across the subnormal, normal and saturated ranges), some random bit patterns with inf and NaN.
inline Tensor random_tensor(DType dtype, std::int64_t n, std::mt19937_64& rng, bool specials) {
  Tensor t{dtype, std::vector<unsigned char>(static_cast<std::size_t>(n) * element_size(dtype)), n};
  std::normal_distribution<double> normal;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t r = rng();
    double v = normal(rng) * std::ldexp(1.0, static_cast<int>(r % 24) - 12);
    std::uint64_t b = 0;
    switch (dtype) {
      case DType::kFloat32:
        b = bits32(static_cast<float>(v));
        if (specials && r % 64 == 1) b = r >> 32;  // any pattern, NaNs and infs included
        if (specials && r % 97 == 2) b = (r & 0x80000000u) | 0x7f800000u;
        break;
      case DType::kFloat64:
        b = bits64(v);
        if (specials && r % 64 == 1) b = r ^ (r << 7);
        if (specials && r % 97 == 2) b = (r & 0x8000000000000000ull) | 0x7ff0000000000000ull;
        break;
      case DType::kFloat16:
        b = testing::float_to_half_ref(static_cast<float>(v));
        if (specials && r % 64 == 1) b = r >> 48;
        break;
      case DType::kBFloat16:
        b = testing::float_to_bf16_ref(static_cast<float>(v));
        if (specials && r % 64 == 1) b = r >> 48;
        break;
    }
    std::memcpy(t.bytes.data() + i * element_size(dtype), &b, element_size(dtype));
  }
  return t;
}

// ---- The kernels' threads, emulated ----------------------------------------------------------

// quantize_kernel's threads: each thread's grid-stride share; returns the max of their amaxes.
template <DType kType, Fp8Format kFormat, bool kAmax>
std::uint32_t run_quantize(Tensor& x, std::uint8_t* q, float scale, int threads,
                           bool skip_nan = false) {
  const auto* data = static_cast<const typename Fp8Io<kType>::Storage*>(x.data());
  std::uint32_t amax = 0;
  for (int t = 0; t < threads; ++t) {
    amax = max_bits(amax, quantize_share<kType, kFormat, kAmax>(data, q, x.n, scale, t, threads,
                                                                skip_nan));
  }
  return amax;
}

// quantize_mxfp8_kernel's `warps` warps, each walking its blocks, lane by lane: loads, the
// group's max (the shuffles), stores.
template <DType kType, Fp8Format kFormat>
void run_mx(Tensor& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales, int warps = 5,
            bool skip_nan = false) {
  const auto* data = static_cast<const typename Fp8Io<kType>::Storage*>(x.data());
  const std::int64_t blocks = x.n / cols * ((cols + kMxBlock - 1) / kMxBlock);
  for (int w = 0; w < warps; ++w) {
    for (MxWalk walk(cols, w, warps); walk.block() < blocks; walk.next()) {
      const MxBlockSpan span = walk.span();
      float v[kMxBlock];
      std::uint32_t bits = 0;
      for (int l = 0; l < kMxBlock; ++l) {
        v[l] = mx_lane_load<kType>(data, span, l);
        bits = max_bits(bits, amax_candidate(v[l], skip_nan));
      }
      for (int l = 0; l < kMxBlock; ++l) {
        mx_lane_store<kFormat>(v[l], bits, span, l, q, scales + walk.block());
      }
    }
  }
}

// dequantize_mxfp8_kernel's `warps` warps, lane by lane.
template <DType kType, Fp8Format kFormat>
void run_mx_dequantize(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                       typename Fp8Io<kType>::Storage* out, std::int64_t n, int warps = 3) {
  const std::int64_t blocks = n / cols * ((cols + kMxBlock - 1) / kMxBlock);
  for (int w = 0; w < warps; ++w) {
    for (MxWalk walk(cols, w, warps); walk.block() < blocks; walk.next()) {
      const MxBlockSpan span = walk.span();
      for (int l = 0; l < span.size; ++l) {
        const std::int64_t i = span.begin + l;
        out[i] = mx_dequantize_element<kType, kFormat>(q[i], scales[walk.block()]);
      }
    }
  }
}

}  // namespace mixprec::core::cuda
