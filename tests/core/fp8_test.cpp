// FP8 element conversions and the per-tensor kernels. float_to_fp8_bits / fp8_bits_to_float of
// mixprec/core/fp8.h against the independent reference of fp8_reference.h (every fp16 and bf16
// value, the ties and edges, random floats); then amax_, quantize_fp8_, dequantize_fp8_ and
// quantize_fp8_current_ bit for bit against those scalar functions for every input dtype, every
// compiled SIMD target, 1 to 3 threads and sizes with tails.
#include "mixprec/core/fp8.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/fp8_reference.h"
#include "mixprec/core/half.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {
namespace {

namespace ref = fp8_reference;
using ref::bits_in;
using ref::for_each_backend;
using ref::ThreadCount;
using ref::Typed;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Expects float_to_fp8_bits(v) == ref::quantize(v) for each v; reports the first few misses.
void expect_casts_match(const std::vector<float>& values, Fp8Format f) {
  int misses = 0;
  for (float v : values) {
    const std::uint8_t got = float_to_fp8_bits(v, f);
    const std::uint8_t want = ref::quantize(v, f);
    if (got != want && ++misses <= 5) {
      ADD_FAILURE() << fp8_format_name(f) << ": cast of " << v << " (bits 0x" << std::hex
                    << ref::bits32(v) << ") gave 0x" << int{got} << ", the nearest code is 0x"
                    << int{want};
    }
  }
  EXPECT_EQ(misses, 0) << fp8_format_name(f) << ": of " << values.size() << " values";
}

TEST(Fp8CastTest, ReferenceHasTheFormatsPublishedValues) {
  // The spec's table (shared/spec/fp8.md): largest finite, smallest normal; and the subnormals.
  EXPECT_EQ(ref::decode(ref::max_code(Fp8Format::kE4M3), Fp8Format::kE4M3), 448.0);
  EXPECT_EQ(ref::decode(ref::max_code(Fp8Format::kE5M2), Fp8Format::kE5M2), 57344.0);
  EXPECT_EQ(ref::max_code(Fp8Format::kE4M3), 0x7e);
  EXPECT_EQ(ref::max_code(Fp8Format::kE5M2), 0x7b);
  EXPECT_EQ(ref::decode(0x08, Fp8Format::kE4M3), std::ldexp(1.0, -6));
  EXPECT_EQ(ref::decode(0x04, Fp8Format::kE5M2), std::ldexp(1.0, -14));
  EXPECT_EQ(ref::decode(0x01, Fp8Format::kE4M3), std::ldexp(1.0, -9));
  EXPECT_EQ(ref::decode(0x01, Fp8Format::kE5M2), std::ldexp(1.0, -16));
  EXPECT_TRUE(std::isnan(ref::decode(0x7f, Fp8Format::kE4M3)));
  EXPECT_EQ(ref::decode(0xfc, Fp8Format::kE5M2), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(fp8_max(Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::kE5M2), 57344.0f);
  EXPECT_STREQ(fp8_format_name(Fp8Format::kE4M3), "e4m3");
  EXPECT_STREQ(fp8_format_name(Fp8Format::kE5M2), "e5m2");
}

TEST(Fp8CastTest, DecodesEveryCodeAsTheFormatDefines) {
  for (Fp8Format f : ref::kFormats) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const float got = fp8_bits_to_float(code, f);
      const double want = ref::decode(code, f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << fp8_format_name(f) << " code " << c;
        EXPECT_EQ(std::signbit(got), c >= 0x80) << fp8_format_name(f) << " code " << c;
      } else {
        EXPECT_EQ(ref::bits32(got), ref::bits32(static_cast<float>(want)))
            << fp8_format_name(f) << " code " << c << ": " << got << " vs " << want;
      }
    }
  }
}

TEST(Fp8CastTest, CastsEveryFloat16Value) {
  std::vector<float> values;
  for (std::uint32_t h = 0; h < 65536; ++h)
    values.push_back(half_bits_to_float(static_cast<std::uint16_t>(h)));
  for (Fp8Format f : ref::kFormats) expect_casts_match(values, f);
}

TEST(Fp8CastTest, CastsEveryBFloat16Value) {
  std::vector<float> values;
  for (std::uint32_t b = 0; b < 65536; ++b)
    values.push_back(bf16_bits_to_float(static_cast<std::uint16_t>(b)));
  for (Fp8Format f : ref::kFormats) expect_casts_match(values, f);
}

TEST(Fp8CastTest, CastsTiesEdgesAndRandomFloats) {
  std::mt19937 rng(22);
  for (Fp8Format f : ref::kFormats) {
    std::vector<float> values = ref::edge_floats(f);
    std::uniform_real_distribution<double> log2_range(-28.0, 18.0);
    for (int i = 0; i < 200000; ++i) {
      values.push_back(ref::from_bits32(static_cast<std::uint32_t>(rng())));  // any bits
      const float v = static_cast<float>(std::exp2(log2_range(rng)));         // the format's range
      values.push_back(rng() % 2 ? v : -v);
    }
    expect_casts_match(values, f);
  }
}

// ---- Kernels ---------------------------------------------------------------------------------

// Values for kernel inputs: mostly finite across the fp8 range and beyond, with zeros, subnormals
// of the dtype and of fp8; `specials` adds infinities and NaNs.
// `max_log2` bounds the finite magnitudes.
std::vector<double> kernel_values(std::int64_t n, bool specials, unsigned seed,
                                  double max_log2 = 20.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> log2_range(-30.0, max_log2);
  std::vector<double> out(static_cast<std::size_t>(n));
  for (auto& v : out) {
    const unsigned pick = rng() % 64;
    if (pick == 0) {
      v = 0.0;
    } else if (pick == 1) {
      v = std::ldexp(static_cast<double>(rng() % 16), -140);  // float subnormals
    } else if (pick == 2 && specials) {
      v = rng() % 2 ? kInf : kNaN;
    } else {
      v = std::exp2(log2_range(rng));
    }
    if (rng() % 2) v = -v;
  }
  return out;
}

Typed typed_values(DType dtype, const std::vector<double>& values) {
  Typed x(dtype, static_cast<std::int64_t>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) x.set(static_cast<std::int64_t>(i), values[i]);
  return x;
}

// max |x| as amax_ defines it, from the exact values: float(max); NaN if any element is NaN
// (NanAmax::kPropagate), or the max over the others (kIgnore).
float expected_amax(const Typed& x, NanAmax nan = NanAmax::kPropagate) {
  double m = 0.0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double a = std::fabs(x.value(i));
    if (std::isnan(a) && nan == NanAmax::kIgnore) continue;
    if (std::isnan(a)) return kNaN;
    m = std::max(m, a);
  }
  return static_cast<float>(m);
}

void expect_same_float(float got, float want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got;
  } else {
    EXPECT_EQ(ref::bits32(got), ref::bits32(want)) << what << ": got " << got << ", want " << want;
  }
}

// q (n bytes, then guard bytes 0x5a) against `want`; names the first mismatch.
void expect_codes(const std::vector<std::uint8_t>& q, const std::vector<std::uint8_t>& want,
                  const Typed& x, const std::string& what) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (q[i] != want[i]) {
      ADD_FAILURE() << what << ": element " << i << " of " << want.size() << " ("
                    << x.value(static_cast<std::int64_t>(i)) << ") gave 0x" << std::hex << int{q[i]}
                    << ", want 0x" << int{want[i]};
      return;
    }
  }
  for (std::size_t i = want.size(); i < q.size(); ++i) {
    if (q[i] != 0x5a) {
      ADD_FAILURE() << what << ": wrote past the end, at " << i;
      return;
    }
  }
}

constexpr std::int64_t kSizes[] = {0,  1,  2,  3,  5,  7,  8,   9,   15,   16,   17,
                                   31, 32, 33, 63, 64, 65, 127, 129, 1000, 32771};
constexpr std::int64_t kThreaded = 800003;  // > 1.5 MB even for 16-bit types: up to 3 threads

TEST(Fp8KernelTest, QuantizeIsTheScalarCastForEveryTargetDtypeSizeAndThreadCount) {
  std::vector<std::int64_t> sizes(std::begin(kSizes), std::end(kSizes));
  sizes.push_back(kThreaded);
  for (DType dtype : ref::kDTypes) {
    for (std::int64_t n : sizes) {
      const Typed x = typed_values(dtype, kernel_values(n, n % 2 == 1, static_cast<unsigned>(n)));
      const float amax_want = expected_amax(x);
      for (Fp8Format f : ref::kFormats) {
        // Positive finite scales take the kernels' fast path (with a NaN-aware retry); -2.5, 0
        // and inf (0 * inf is NaN) the general one.
        for (float scale : {1.0f, 3.3f, 1.0f / 1024, 1e20f, -2.5f, 0.0f, kInf}) {
          if (n == kThreaded && scale != 3.3f) continue;  // the large size is for the threads
          std::vector<std::uint8_t> want(static_cast<std::size_t>(n));
          for (std::int64_t i = 0; i < n; ++i)
            want[static_cast<std::size_t>(i)] = float_to_fp8_bits(x.as_float(i) * scale, f);
          for_each_backend([&](const std::string& backend) {
            for (int threads : n == kThreaded ? std::vector<int>{1, 2, 3} : std::vector<int>{1}) {
              const ThreadCount scoped(threads);
              const std::string what = backend + " " + dtype_name(dtype) + " " +
                                       fp8_format_name(f) + " n=" + std::to_string(n) +
                                       " scale=" + std::to_string(scale) +
                                       " threads=" + std::to_string(threads);
              std::vector<std::uint8_t> q(static_cast<std::size_t>(n) + 16, 0x5a);
              float amax = 0.0f;
              quantize_fp8_(x.view(), q.data(), f, &scale, &amax);
              expect_codes(q, want, x, what);
              expect_same_float(amax, amax_want, what + " amax");
              std::fill(q.begin(), q.end(), 0x5a);
              quantize_fp8_(x.view(), q.data(), f, &scale);  // no amax: the same codes
              expect_codes(q, want, x, what + " (no amax)");
              std::fill(q.begin(), q.end(), 0x5a);
              amax = 0.0f;  // NaNs skipped (TE): the same codes, the others' amax
              quantize_fp8_(x.view(), q.data(), f, &scale, &amax, nullptr, NanAmax::kIgnore);
              expect_codes(q, want, x, what + " (NaNs skipped)");
              expect_same_float(amax, expected_amax(x, NanAmax::kIgnore), what + " amax kIgnore");
            }
          });
        }
      }
    }
  }
}

TEST(Fp8KernelTest, AmaxAccumulatesIntoTheSlotAndPropagatesNaN) {
  for (DType dtype : ref::kDTypes) {
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{37}, std::int64_t{4099}, kThreaded}) {
      std::vector<double> values = kernel_values(n, false, 7, 8.0);  // below 256
      values[static_cast<std::size_t>(n / 2)] = -300.0;  // the largest magnitude, negative
      Typed x = typed_values(dtype, values);
      for_each_backend([&](const std::string& backend) {
        for (int threads : {1, 3}) {
          const ThreadCount scoped(threads);
          const std::string what = backend + " " + dtype_name(dtype) + " n=" + std::to_string(n);
          float slot = 0.0f;
          amax_(x.view(), &slot);
          EXPECT_EQ(slot, 300.0f) << what;
          slot = 1000.0f;  // larger already: kept
          amax_(x.view(), &slot);
          EXPECT_EQ(slot, 1000.0f) << what;
          slot = kNaN;  // NaN already: kept
          amax_(x.view(), &slot);
          EXPECT_TRUE(std::isnan(slot)) << what;
          slot = 5.0f;
          amax_({x.view().data, 0, dtype}, &slot);  // empty: unchanged
          EXPECT_EQ(slot, 5.0f) << what;
        }
      });
      // A NaN or an infinity anywhere, the tail included, decides the amax.
      for (std::int64_t at : {std::int64_t{0}, n / 3, n - 1}) {
        for (double special : {static_cast<double>(-kInf), static_cast<double>(kNaN), -1e300}) {
          if (special == -1e300 && dtype != DType::kFloat64) continue;  // float(1e300) = inf
          const double saved = x.value(at);
          x.set(at, special);
          for_each_backend([&](const std::string& backend) {
            const ThreadCount scoped(3);
            float slot = 1.0f;
            amax_(x.view(), &slot);
            expect_same_float(
                slot, std::isnan(special) ? kNaN : kInf,
                backend + " " + dtype_name(dtype) + " special at " + std::to_string(at));
            float recorded = 1.0f;
            const float scale = 1.0f;
            std::vector<std::uint8_t> q(static_cast<std::size_t>(n));
            quantize_fp8_(x.view(), q.data(), Fp8Format::kE4M3, &scale, &recorded);
            expect_same_float(recorded, slot, backend + " quantize_fp8_ records the same amax");
            // TE's kernels (fmaxf) skip a NaN: the amax of the other elements, at least 1 here.
            const float skipped = std::max(1.0f, expected_amax(x, NanAmax::kIgnore));
            float ignored = 1.0f;
            amax_(x.view(), &ignored, nullptr, NanAmax::kIgnore);
            expect_same_float(ignored, skipped, backend + " amax_ kIgnore");
            EXPECT_FALSE(std::isnan(ignored)) << backend;
            ignored = 1.0f;
            quantize_fp8_(x.view(), q.data(), Fp8Format::kE4M3, &scale, &ignored, nullptr,
                          NanAmax::kIgnore);
            expect_same_float(ignored, skipped, backend + " quantize_fp8_ kIgnore");
          });
          x.set(at, saved);
        }
      }
    }
  }
}

TEST(Fp8KernelTest, DequantizeIsTheScalarDecodeTimesScaleInv) {
  std::mt19937 rng(5);
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{9},
                         std::int64_t{33}, std::int64_t{261}, std::int64_t{4101}, kThreaded}) {
    std::vector<std::uint8_t> q(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      q[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i < 256 ? i : rng());
    for (DType dtype : ref::kDTypes) {
      for (Fp8Format f : ref::kFormats) {
        // 2^-130: products far below float's normals; 1e36: products past its range.
        for (float scale_inv : {1.0f, 0.37f, std::ldexp(1.0f, -130), 1e36f}) {
          if (n == kThreaded && scale_inv != 0.37f) continue;  // the large size is for the threads
          std::vector<std::uint64_t> want(static_cast<std::size_t>(n));
          for (std::int64_t i = 0; i < n; ++i) {
            want[static_cast<std::size_t>(i)] =
                bits_in(dtype, fp8_bits_to_float(q[static_cast<std::size_t>(i)], f) * scale_inv);
          }
          for_each_backend([&](const std::string& backend) {
            for (int threads : n == kThreaded ? std::vector<int>{1, 2, 3} : std::vector<int>{1}) {
              const ThreadCount scoped(threads);
              Typed out(dtype, n);
              dequantize_fp8_(q.data(), f, &scale_inv, out.view());
              for (std::int64_t i = 0; i < n; ++i) {
                if (out.bits(i) != want[static_cast<std::size_t>(i)]) {
                  const float wanted =
                      fp8_bits_to_float(q[static_cast<std::size_t>(i)], f) * scale_inv;
                  ADD_FAILURE() << backend << " " << dtype_name(dtype) << " " << fp8_format_name(f)
                                << " scale_inv " << scale_inv << " threads " << threads
                                << ": code 0x" << std::hex << int{q[static_cast<std::size_t>(i)]}
                                << " at " << std::dec << i << " gave " << out.value(i) << ", want "
                                << wanted;
                  break;
                }
              }
              EXPECT_TRUE(out.guard_intact()) << backend << " wrote past the end";
            }
          });
        }
      }
    }
  }
}

// The current rule as written by torchao (float8_utils.py amax_to_scale: fp8_max / clamp(amax,
// EPS) in float64, stored as float32; _round_scale_down_to_power_of_2) with TE's guards
// (recipe_common.cuh: inf/NaN amax, or 0 with eps 0, -> 1; infinite scale -> FLT_MAX).
float reference_current_scale(float amax, Fp8Format f, float eps, bool pow2) {
  if (!std::isfinite(amax)) return 1.0f;
  if (std::max(amax, eps) == 0.0f) return 1.0f;  // TE's guard for amax 0 (eps 0)
  float scale = static_cast<float>(ref::decode(ref::max_code(f), f) / std::max<double>(amax, eps));
  if (std::isinf(scale)) scale = FLT_MAX;
  if (pow2) {
    int e = 0;
    std::frexp(scale, &e);  // scale = m * 2^e, m in [0.5, 1)
    scale = std::ldexp(1.0f, e - 1);
  }
  return scale;
}

TEST(Fp8KernelTest, CurrentScalingWritesAmaxScaleScaleInvAndTheCodes) {
  struct Case {
    std::vector<double> values;
    float eps;
  };
  const std::vector<Case> cases = {
      {{1.0, -3.5, 2.0, 0.25}, 1e-12f},  // 448 / 3.5 = 128
      {{0.1, -1.7, 1e-3}, 1e-12f},       // not a power of two
      {{0.0, -0.0, 0.0}, 1e-12f},        // all zero: eps
      {{0.0, 0.0}, 0.0f},                // no eps, amax 0: scale 1 (TE's guard)
      {{1e-40, -2e-41}, 0.0f},           // a subnormal amax: likewise
      {{1e-20, 1e-21}, 1e-12f},          // below eps
      {{1.0, -kInf, 2.0}, 1e-12f},       // inf: scale 1
      {{1.0, kNaN, 2.0}, 1e-12f},        // NaN: scale 1, amax NaN (kIgnore: amax 2, scale 224)
      {std::vector<double>(70001, 0.75), 1e-12f},
  };
  for (const Case& c : cases) {
    for (DType dtype : ref::kDTypes) {
      const Typed x = typed_values(dtype, c.values);
      for (NanAmax nan : {NanAmax::kPropagate, NanAmax::kIgnore}) {
        const float amax_want = expected_amax(x, nan);
        for (Fp8Format f : ref::kFormats) {
          for (bool pow2 : {false, true}) {
            const float scale_want = reference_current_scale(amax_want, f, c.eps, pow2);
            std::vector<std::uint8_t> want(c.values.size());
            for (std::size_t i = 0; i < want.size(); ++i)
              want[i] = float_to_fp8_bits(x.as_float(static_cast<std::int64_t>(i)) * scale_want, f);
            for_each_backend([&](const std::string& backend) {
              const std::string what = backend + " " + dtype_name(dtype) + " " +
                                       fp8_format_name(f) + " amax " + std::to_string(amax_want) +
                                       (pow2 ? " pow2" : "") +
                                       (nan == NanAmax::kIgnore ? " kIgnore" : "");
              CurrentScaling rule;
              rule.eps = c.eps;
              rule.power_of_2_scales = pow2;
              rule.nan = nan;
              float scale = 0.0f, scale_inv = 0.0f,
                    amax = 1e9f;  // amax is overwritten, not accumulated
              std::vector<std::uint8_t> q(want.size() + 16, 0x5a);
              quantize_fp8_current_(x.view(), q.data(), f, rule, &scale, &scale_inv, &amax);
              expect_same_float(amax, amax_want, what + " amax");
              EXPECT_EQ(scale, scale_want) << what;
              EXPECT_EQ(scale_inv, 1.0f / scale_want) << what;
              expect_codes(q, want, x, what);
            });
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mixprec::core
