// E2M1 elements, stochastic rounding, Philox and the RHT (mixprec/core/fp4.h, core/fp4_ops.h)
// against the independent reference of fp4_reference.h: every bf16 pattern and the float
// neighbours of every rounding boundary through the cast; the stochastic rounder's bias over 10^6
// draws; Random123's Philox4x32-10 against its published known-answer vectors; the RHT against a
// matrix product in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/fp4_ops.h"
#include "core/fp4_reference.h"
#include "mixprec/core/error.h"
#include "mixprec/core/fp4.h"

namespace mixprec::core {
namespace {

namespace ref = fp4_reference;

TEST(Fp4ElementTest, DecodeMatchesTheFields) {
  for (int code = 0; code < 16; ++code) {
    const float v = e2m1_to_float(static_cast<std::uint8_t>(code));
    EXPECT_EQ(static_cast<double>(v), ref::decode(static_cast<std::uint8_t>(code))) << code;
    EXPECT_EQ(std::signbit(v), code >= 8) << code;  // code 8 is -0
  }
  EXPECT_EQ(e2m1_to_float(0xf7), 6.0f);  // the high nibble is ignored
}

TEST(Fp4ElementTest, EveryBf16PatternCastsAsTheNearestCode) {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const float v = ref::from_bits32(b << 16);
    ASSERT_EQ(float_to_e2m1(v), ref::cast(v)) << std::hex << "bf16 0x" << b;
  }
}

TEST(Fp4ElementTest, TiesGoToEvenAndTheBoundariesNeighboursRoundAway) {
  // TE's reference_nvfp4.py lists the ties: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
  // 3.5 -> 4, 5 -> 4.
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float tie_values[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
  for (int i = 0; i < 7; ++i) {
    for (const float sign : {1.0f, -1.0f}) {
      const float t = sign * ties[i];
      EXPECT_EQ(e2m1_to_float(float_to_e2m1(t)), sign * tie_values[i]) << t;
      for (const float n : {std::nextafter(t, 0.0f), std::nextafter(t, 100.0f * t)}) {
        EXPECT_EQ(float_to_e2m1(n), ref::cast(n)) << n;
      }
    }
  }
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);  // rounds to zero, keeps its sign
  EXPECT_EQ(float_to_e2m1(INFINITY), 0x7);
  EXPECT_EQ(float_to_e2m1(-INFINITY), 0xf);
  EXPECT_EQ(float_to_e2m1(1e30f), 0x7);
  for (const std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0xff800001u, 0x7fffffffu}) {
    EXPECT_EQ(float_to_e2m1(ref::from_bits32(nan)), 0x7) << std::hex << nan;  // TE: every NaN
  }
}

TEST(Fp4ElementTest, RandomFloatsCastAsTheNearestCode) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    // Exponents around E2M1's range (2^-4 .. 2^4) most of the time, any pattern otherwise.
    std::uint32_t b = bits(rng);
    if (i % 4 != 0) b = (b & 0x807fffffu) | ((123u + b % 9u) << 23);
    const float v = ref::from_bits32(b);
    ASSERT_EQ(float_to_e2m1(v), ref::cast(v)) << std::hex << b;
  }
}

// ---- Stochastic rounding --------------------------------------------------------------------

// The two codes around |v|, by the reference: the largest at or below and the smallest above.
void neighbours(float v, double* down, double* up) {
  const double a = std::fabs(static_cast<double>(v));
  *down = 0.0;
  *up = 6.0;
  for (std::uint8_t c = 0; c < 8; ++c) {
    const double d = ref::decode(c);
    if (d <= a && d > *down) *down = d;
    if (d > a && d < *up) *up = d;
  }
}

TEST(Fp4StochasticTest, EveryRandomByteGivesANeighbourAndTheCountMatchesTheFraction) {
  // With u = r / 256 over all 256 bytes, TE's rounder goes up for the r with fraction + u >= 1:
  // exactly floor(256 * fraction) of them (fraction = (|v| - down) / step).
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> magnitude(0.0f, 6.5f);
  for (int i = 0; i < 20000; ++i) {
    const float v = (i % 2 == 0 ? 1.0f : -1.0f) * magnitude(rng);
    double down, up;
    neighbours(v, &down, &up);
    int ups = 0;
    for (std::uint32_t r = 0; r < 256; ++r) {
      const std::uint8_t code = float_to_e2m1_stochastic(v, r);
      ASSERT_EQ((code & 8) != 0, std::signbit(v)) << v;
      const double q = std::fabs(ref::decode(code));
      ASSERT_TRUE(q == down || q == up) << v << " r " << r << " gave " << q;
      ups += q == up && std::fabs(v) < 6.0f;
    }
    const double fraction = std::fabs(v) >= 6.0f ? 0.0 : (std::fabs(v) - down) / (up - down);
    ASSERT_EQ(ups, static_cast<int>(std::floor(256.0 * fraction))) << v;
  }
  EXPECT_EQ(float_to_e2m1_stochastic(1.0f, 255), 0x2);  // a code value never moves
  EXPECT_EQ(float_to_e2m1_stochastic(NAN, 0), 0x7);
  EXPECT_EQ(float_to_e2m1_stochastic(-INFINITY, 3), 0xf);
  EXPECT_EQ(float_to_e2m1_stochastic(-0.0f, 255), 0x8);
}

TEST(Fp4StochasticTest, UnbiasedWithinAStatedBoundOverAMillionPhiloxDraws) {
  // Over 10^6 draws the mean of the rounded values is within step / 256 (the 8-bit u) plus five
  // standard errors of v: stochastic rounding is unbiased, round-to-nearest is not.
  const int draws = 1000000;
  for (const float v : {0.1f, 0.3f, 0.8f, 1.3f, 2.7f, 3.9f, 4.4f, 5.9f, -2.2f}) {
    double down, up;
    neighbours(v, &down, &up);
    const double step = up - down;
    double sum = 0.0;
    std::uint32_t words[4];
    for (int i = 0; i < draws; ++i) {
      if (i % 16 == 0) philox_bytes(1234, 99, static_cast<std::uint64_t>(i / 16), words);
      sum += ref::decode(float_to_e2m1_stochastic(v, random_byte(words, i % 16)));
    }
    const double p = (std::fabs(v) - down) / step;
    const double bound = step / 256.0 + 5.0 * step * std::sqrt(p * (1.0 - p) / draws);
    EXPECT_NEAR(sum / draws, v, bound) << v;
    EXPECT_GT(std::fabs(ref::decode(float_to_e2m1(v)) - v), bound) << v << ": RNE is biased here";
  }
}

// ---- Philox (Random123) ------------------------------------------------------------------------

TEST(Fp4PhiloxTest, Random123MatchesItsPublishedKnownAnswers) {
  // Random123's tests/kat_vectors, "philox4x32 10": counter (4 words), key (2 words), output.
  // philox_bytes puts the group in counter words 0-1, the offset in 2-3, the seed in the key.
  struct Kat {
    std::uint64_t group, offset, seed;
    std::uint32_t out[4];
  };
  const Kat kats[] = {
      {0, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {~0ull, ~0ull, ~0ull, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull,
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    std::uint32_t out[4];
    philox_bytes(k.seed, k.offset, k.group, out);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out[w], k.out[w]) << std::hex << k.group << " word " << w;
  }
  std::uint32_t words[4] = {0x44332211u, 0, 0, 0x00ee0000u};
  EXPECT_EQ(random_byte(words, 0), 0x11u);
  EXPECT_EQ(random_byte(words, 3), 0x44u);
  EXPECT_EQ(random_byte(words, 14), 0xeeu);
}

// ---- RHT ------------------------------------------------------------------------------------

TEST(Fp4HadamardTest, SignsAreTransformerEngines) {
  const int te_signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(((kRhtSignBits >> i) & 1u) != 0, te_signs[i] < 0) << i;
}

TEST(Fp4HadamardTest, MatchesTheMatrixProductInDoubleRoundedToBf16) {
  // y_j = 1/4 sum_i s_i x_i (-1)^popcount(i & j). For bf16 inputs within three binades
  // (|x| in [0.5, 4): 8 significant bits, sums of 16 need at most 15) the float32 butterfly is
  // exact, so the result is the exact product rounded once to bf16.
  const int te_signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> magnitude(0.5f, 4.0f);
  const int groups = 4096;
  std::vector<float> x(16 * groups);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = bf16_bits_to_float(float_to_bf16_bits((i % 3 == 0 ? -1.0f : 1.0f) * magnitude(rng)));
  }
  std::vector<std::uint16_t> y(x.size());
  hadamard16_({x.data(), static_cast<std::int64_t>(x.size()), DType::kFloat32}, y.data());
  for (int g = 0; g < groups; ++g) {
    for (int j = 0; j < 16; ++j) {
      double exact = 0.0;
      for (int i = 0; i < 16; ++i) {
        const int h = (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) != 0 ? -1 : 1;
        exact += te_signs[i] * h * static_cast<double>(x[16 * g + i]);
      }
      // Round exact / 4 to bf16 by search among the two bf16 neighbours of its float.
      const float f = static_cast<float>(exact / 4.0);
      ASSERT_EQ(static_cast<double>(f), exact / 4.0) << "the float32 sums were not exact";
      ASSERT_EQ(y[16 * g + j], float_to_bf16_bits(f)) << "group " << g << " j " << j;
    }
  }
  // An fp32 input is rounded to bf16 first: the same result as its bf16 rounding.
  std::vector<float> wide(16, 1.0f + std::ldexp(1.0f, -12));
  std::vector<float> narrow(16, 1.0f);
  std::vector<std::uint16_t> a(16), b(16);
  hadamard16_({wide.data(), 16, DType::kFloat32}, a.data());
  hadamard16_({narrow.data(), 16, DType::kFloat32}, b.data());
  EXPECT_EQ(a, b);
}

TEST(Fp4HadamardTest, RejectsARunThatIsNotWhole) {
  std::vector<float> x(20);
  std::vector<std::uint16_t> y(20);
  EXPECT_THROW(hadamard16_({x.data(), 20, DType::kFloat32}, y.data()), Error);
}

}  // namespace
}  // namespace mixprec::core
