// fp16/bf16 conversions of core/half.h against independent references: the compiler's binary16 type
// (GCC >= 12 on x86-64) for binary16, and a nearest-neighbour search in double for bfloat16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "core/reference.h"
#include "mixprec/core/half.h"

namespace mixprec::core {
namespace {

TEST(HalfTest, EveryHalfWidensExactly) {
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const auto h = static_cast<std::uint16_t>(u);
    const float expected = static_cast<float>(testing::half_to_double(h));
    const float got = half_bits_to_float(h);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << u;
    } else {
      ASSERT_EQ(float_to_bits(got), float_to_bits(expected)) << u;
    }
  }
}

TEST(HalfTest, FloatsRoundToNearestEvenHalf) {
  // Every half, its neighbours in float, and the midpoints between halves (the ties).
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const float base = half_bits_to_float(static_cast<std::uint16_t>(u));
    if (std::isnan(base)) continue;
    const std::uint32_t b = float_to_bits(base);
    for (std::uint32_t probe : {b, b + 1, b - 1, b + 0x1000u, b + 0xfffu, b + 0x1001u}) {
      const float f = bits_to_float(probe);
      if (std::isnan(f)) continue;
      ASSERT_EQ(float_to_half_bits(f), testing::float_to_half_ref(f)) << f;
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const float f = bits_to_float(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half_bits(f), testing::float_to_half_ref(f)) << f;
  }
}

TEST(HalfTest, OverflowToInfinityAndNaNStaysNaN) {
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bffu);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_half_bits(-1e30f), 0xfc00u);
  EXPECT_TRUE(half_bits_nonfinite(float_to_half_bits(std::nanf(""))));
  EXPECT_NE(float_to_half_bits(std::nanf("")) & 0x3ffu, 0u);  // NaN, not inf
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000u);
}

TEST(HalfTest, Bf16WidensByShiftAndRoundsToNearestEven) {
  EXPECT_EQ(bf16_bits_to_float(0x3f80u), 1.0f);
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    const float f = bits_to_float(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f) || std::isinf(f)) continue;
    const std::uint16_t got = float_to_bf16_bits(f);
    ASSERT_EQ(got, testing::float_to_bf16_ref(f)) << f;
  }
  // Exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; ties go to the even mantissa.
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82u);
  EXPECT_EQ(float_to_bf16_bits(3.4028235e38f), 0x7f80u);  // FLT_MAX rounds up to inf
  EXPECT_TRUE(bf16_bits_nonfinite(float_to_bf16_bits(std::nanf(""))));
  EXPECT_NE(float_to_bf16_bits(std::nanf("")) & 0x7fu, 0u);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000u);
}

TEST(HalfTest, NonFiniteTestsLookOnlyAtExponentBits) {
  EXPECT_TRUE(is_nonfinite(std::numeric_limits<float>::infinity()));
  EXPECT_TRUE(is_nonfinite(-std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(is_nonfinite(std::nan("")));
  EXPECT_FALSE(is_nonfinite(std::numeric_limits<float>::max()));
  EXPECT_FALSE(is_nonfinite(std::numeric_limits<float>::denorm_min()));
  EXPECT_TRUE(half_bits_nonfinite(0x7c00u));
  EXPECT_TRUE(half_bits_nonfinite(0xfe01u));
  EXPECT_FALSE(half_bits_nonfinite(0x7bffu));
  EXPECT_TRUE(bf16_bits_nonfinite(0xff80u));
  EXPECT_FALSE(bf16_bits_nonfinite(0x7f7fu));
}

}  // namespace
}  // namespace mixprec::core
