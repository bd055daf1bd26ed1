// NVFP4 (quantize_nvfp4_ / dequantize_nvfp4_, 1D and 2D) and MXFP4 (quantize_mxfp4_ /
// dequantize_mxfp4_, FLOOR and RCEIL) against fp4_reference.h's TE and torchao rules written out,
// for every input dtype and 1 or 2 threads, on inputs with zero, tiny, subnormal, inf and NaN
// blocks; TE 2.13's order of operations is shown to differ on these inputs, so the kernels'
// agreement with TE >= 2.14 is not an accident of the data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/fp4_ops.h"
#include "core/fp4_reference.h"
#include "mixprec/core/error.h"
#include "mixprec/core/fp4.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {
namespace {

namespace ref = fp4_reference;
using fp8_reference::bits_in;
using fp8_reference::ThreadCount;
using fp8_reference::Typed;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

// rows x cols values: normals times exp(3z) (a wide range), and blocks of 16 that are all zero,
// subnormal-tiny, tiny, or hold -0, a quiet, signalling and negative NaN, or (with `inf`) +-inf.
std::vector<float> hostile_values(std::int64_t rows, std::int64_t cols, bool inf, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (float& x : v) x = normal(rng) * std::exp(3.0f * normal(rng));
  const std::int64_t blocks = rows * cols / 16;
  for (std::int64_t b = 0; b < blocks; ++b) {
    float* x = v.data() + 16 * b;
    switch (b % 11) {
      case 1:
        for (int i = 0; i < 16; ++i) x[i] = 0.0f;
        break;
      case 3:
        for (int i = 0; i < 16; ++i) x[i] *= 1e-42f;  // float subnormals
        break;
      case 5:
        for (int i = 0; i < 16; ++i) x[i] *= 1e-9f;
        break;
      case 7:
        x[2] = -0.0f;
        x[5] = ref::from_bits32(0x7fc00000u);
        x[6] = ref::from_bits32(0x7f800001u);
        x[9] = ref::from_bits32(0xffc00000u);
        break;
      case 9:
        if (inf) x[4] = (b % 2 == 0) ? INFINITY : -INFINITY;
        break;
      default:
        break;
    }
  }
  return v;
}

Typed typed(DType dtype, const std::vector<float>& values) {
  Typed t(dtype, static_cast<std::int64_t>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

float amax_skipping_nan(const Typed& x, std::int64_t first, std::int64_t n) {
  float a = 0.0f;
  for (std::int64_t i = first; i < first + n; ++i) {
    const float v = std::fabs(x.as_float(i));
    if (!std::isnan(v) && v > a) a = v;
  }
  return a;
}

// ---- NVFP4 ------------------------------------------------------------------------------------

// quantize_nvfp4_ of x (rows x cols) against the reference, codes and scales, then its
// dequantize into every dtype. Adds to *old_order_differs the blocks that TE 2.13's order would
// have scaled otherwise.
void check_nvfp4(const Typed& x, std::int64_t cols, bool two_d, int* old_order_differs = nullptr) {
  const std::int64_t n = x.numel(), rows = n / cols, per_row = cols / 16;
  float amax = 0.0f;
  amax_(x.view(), &amax, nullptr, NanAmax::kIgnore);
  EXPECT_EQ(amax, amax_skipping_nan(x, 0, n));
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n / 2)), s(static_cast<std::size_t>(n / 16));
  Nvfp4Options options;
  options.two_d = two_d;
  quantize_nvfp4_(x.view(), cols, &amax, q.data(), s.data(), options);

  const ref::TeNvfp4 te(amax);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < per_row; ++j) {
      float block_amax = 0.0f;
      if (two_d) {
        for (std::int64_t rr = r / 16 * 16; rr < r / 16 * 16 + 16; ++rr) {
          block_amax = std::fmax(block_amax, amax_skipping_nan(x, rr * cols + 16 * j, 16));
        }
      } else {
        block_amax = amax_skipping_nan(x, r * cols + 16 * j, 16);
      }
      const std::uint8_t want_scale = te.block_scale(block_amax);
      if (old_order_differs != nullptr) {
        *old_order_differs += te.block_scale(block_amax, true) != want_scale;
      }
      const std::int64_t b = r * per_row + j;
      EXPECT_EQ(s[b], want_scale) << "row " << r << " block " << j << " amax_b " << block_amax;
      const float encode = te.encode(want_scale);
      for (int i = 0; i < 16; ++i) {
        const std::int64_t e = r * cols + 16 * j + i;
        const std::uint8_t code = (q[e / 2] >> (4 * (e % 2))) & 0xf;
        ASSERT_EQ(code, ref::cast(x.as_float(e) * encode))
            << "element " << e << " = " << x.as_float(e) << " scale " << int(want_scale);
      }
    }
  }
  for (const DType out_dtype : kDTypes) {
    Typed out(out_dtype, n);
    dequantize_nvfp4_(q.data(), s.data(), &amax, cols, out.view());
    for (std::int64_t e = 0; e < n; ++e) {
      const std::uint8_t code = (q[e / 2] >> (4 * (e % 2))) & 0xf;
      float want = static_cast<float>(ref::decode(code) * ref::TeNvfp4::decode(s[e / 16], amax));
      if (std::isnan(want)) want = ref::from_bits32(0x7fc00000u);  // the kernels' one NaN
      ASSERT_EQ(out.bits(e), bits_in(out_dtype, want)) << "element " << e;
    }
    EXPECT_TRUE(out.guard_intact());
  }
}

TEST(Nvfp4Test, OneDimensionalBlocksFollowTransformerEngine) {
  // Random data almost never lands on an E4M3 tie, where TE 2.13's and 2.14's orders differ:
  // BlockScalesUseTe214sOrderOfOperations builds such blocks.
  fp8_reference::for_each_backend([&](const std::string& backend) {
    SCOPED_TRACE(backend);  // every compiled SIMD target (fp4_simd.cpp)
    for (const DType dtype : kDTypes) {
      for (const int threads : {1, 2}) {
        ThreadCount count(threads);
        const Typed x = typed(dtype, hostile_values(64, 256, false, 1));
        check_nvfp4(x, 256, false);
      }
    }
  });
}

// Blocks built to sit at E4M3 ties of the block scale, where TE 2.13's fl(fl(amax_b / 6) * S_enc)
// and TE >= 2.14's amax_b * fl(S_enc * fl(1/6)) round apart: the kernel must give 2.14's scale
// and codes (check_nvfp4), and the data must tell the two apart.
TEST(Nvfp4Test, BlockScalesUseTe214sOrderOfOperations) {
  const float amax = 1000.0f;
  const ref::TeNvfp4 te(amax);
  const float factor = te.s_enc * (1.0f / 6.0f);
  std::vector<float> v;
  // Midpoints between adjacent E4M3 values, and block amaxes near midpoint / factor.
  for (int code = 8; code < 0x7e && v.size() < 16 * 64; ++code) {
    const float mid = (ref::e4m3_value(static_cast<std::uint8_t>(code)) +
                       ref::e4m3_value(static_cast<std::uint8_t>(code + 1))) / 2.0f;
    float a = mid / factor;
    for (int k = 0; k < 6; ++k, a = std::nextafter(a, 0.0f)) {
      if (te.block_scale(a) != te.block_scale(a, true) && a <= amax) {
        for (int i = 0; i < 16; ++i) v.push_back(i == 0 ? a : a * 0.3f * static_cast<float>(i % 5) / 4.0f);
      }
    }
  }
  ASSERT_GE(v.size(), 16u * 8) << "too few blocks where TE 2.13's and 2.14's orders differ";
  while (v.size() % 64 != 0) v.push_back(0.0f);
  v[1] = amax;  // the tensor's amax, in a block of its own kind
  const Typed x = typed(DType::kFloat32, v);
  int differs = 0;
  check_nvfp4(x, 64, false, &differs);
  EXPECT_GE(differs, 7);
}

TEST(Nvfp4Test, TwoDimensionalTilesShareOneScale) {
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const int threads : {1, 2}) {
      ThreadCount count(threads);
      check_nvfp4(typed(dtype, hostile_values(48, 64, false, 2)), 64, true);
    }
  }
}

TEST(Nvfp4Test, InfinityGivesEncodeScaleOneAndTheLargestBlockScale) {
  // TE: amax inf -> S_enc = 1; the inf's block gets s_b = 448 (0x7e) and the inf code 7.
  const Typed x = typed(DType::kFloat32, hostile_values(16, 64, true, 3));
  check_nvfp4(x, 64, false);
  float amax = 0.0f;
  amax_(x.view(), &amax, nullptr, NanAmax::kIgnore);
  ASSERT_TRUE(std::isinf(amax));
  EXPECT_EQ(nvfp4_encode_scale(amax), 1.0f);
  std::vector<std::uint8_t> q(512), s(64);
  quantize_nvfp4_(x.view(), 64, &amax, q.data(), s.data());
  EXPECT_EQ(s[9], 0x7e);               // block 9 holds -inf at element 4
  EXPECT_EQ(q[9 * 8 + 2] & 0xf, 0xf);  // element 4: the low nibble of byte 2, -6
}

TEST(Nvfp4Test, ZeroAndUnderflowingBlocksGetTransformerEnginesCodes) {
  // One large element sets amax; a block of 1e-30s gets s_b = 0 and codes +-6 (0x7 / 0xf), which
  // dequantize to 0; an all-zero tensor has amax 0, S_enc 1 and all codes 0.
  std::vector<float> v(64, 1e-30f);
  v[3] = -1e-30f;
  v[40] = 1000.0f;
  const Typed x = typed(DType::kFloat32, v);
  float amax = 1000.0f;
  std::vector<std::uint8_t> q(32), s(4);
  quantize_nvfp4_(x.view(), 64, &amax, q.data(), s.data());
  EXPECT_EQ(s[0], 0);
  EXPECT_EQ(q[0], 0x77);
  EXPECT_EQ(q[1], 0xf7);  // element 3 is negative: high nibble of byte 1
  std::vector<float> out(64);
  dequantize_nvfp4_(q.data(), s.data(), &amax, 64, {out.data(), 64, DType::kFloat32});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[40], 1000.0f, 1e-3f);  // s_b = 448: 6 * 448 * 1000 / 2688
  std::vector<float> zeros(32, 0.0f);
  float zero_amax = 0.0f;
  quantize_nvfp4_({zeros.data(), 32, DType::kFloat32}, 32, &zero_amax, q.data(), s.data());
  EXPECT_EQ(s[0], 0);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(nvfp4_encode_scale(0.0f), 1.0f);
}

TEST(Nvfp4Test, StochasticRoundingIsReproducibleAndStaysBetweenNeighbours) {
  const std::vector<float> v = hostile_values(32, 128, false, 4);
  const Typed x = typed(DType::kFloat32, v);
  float amax = 0.0f;
  amax_(x.view(), &amax, nullptr, NanAmax::kIgnore);
  Nvfp4Options options;
  options.stochastic = true;
  options.seed = 42;
  options.offset = 7;
  std::vector<std::uint8_t> q1(v.size() / 2), q2(v.size() / 2), s1(v.size() / 16), s2(v.size() / 16);
  {
    ThreadCount one(1);
    quantize_nvfp4_(x.view(), 128, &amax, q1.data(), s1.data(), options);
  }
  {
    ThreadCount two(2);
    quantize_nvfp4_(x.view(), 128, &amax, q2.data(), s2.data(), options);
  }
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(s1, s2);
  const ref::TeNvfp4 te(amax);
  int differs_from_rne = 0;
  for (std::size_t e = 0; e < v.size(); ++e) {
    const std::uint8_t code = (q1[e / 2] >> (4 * (e % 2))) & 0xf;
    const float scaled = v[e] * te.encode(s1[e / 16]);
    // The byte of philox_bytes(seed, offset, e / 16), as documented in Nvfp4Options.
    std::uint32_t words[4];
    philox_bytes(42, 7, e / 16, words);
    ASSERT_EQ(code, float_to_e2m1_stochastic(scaled, random_byte(words, static_cast<int>(e % 16))));
    differs_from_rne += code != ref::cast(scaled);
  }
  EXPECT_GT(differs_from_rne, 0);
  options.offset = 8;
  quantize_nvfp4_(x.view(), 128, &amax, q2.data(), s2.data(), options);
  EXPECT_NE(q1, q2) << "a new offset must draw new bits";
}

TEST(Nvfp4Test, RejectsBadShapes) {
  std::vector<float> x(48);
  std::vector<std::uint8_t> q(24), s(3);
  float amax = 1.0f;
  EXPECT_THROW(quantize_nvfp4_({x.data(), 48, DType::kFloat32}, 24, &amax, q.data(), s.data()),
               Error);  // cols not a multiple of 16
  Nvfp4Options two_d;
  two_d.two_d = true;
  EXPECT_THROW(
      quantize_nvfp4_({x.data(), 48, DType::kFloat32}, 16, &amax, q.data(), s.data(), two_d),
      Error);  // 3 rows
  EXPECT_THROW(quantize_nvfp4_({x.data(), 48, DType::kFloat32}, 16, nullptr, q.data(), s.data()),
               Error);
}

// ---- MXFP4 ------------------------------------------------------------------------------------

void check_mxfp4(const Typed& x, bool rceil) {
  const std::int64_t n = x.numel();
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n / 2)), s(static_cast<std::size_t>(n / 32));
  quantize_mxfp4_(x.view(), 64, q.data(), s.data(),
                  rceil ? MxScaleMode::kRceil : MxScaleMode::kFloor);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    for (std::int64_t i = 32 * b; i < 32 * b + 32; ++i) {
      const float a = std::fabs(x.as_float(i));
      amax = std::isnan(a) || std::isnan(amax) ? NAN : std::fmax(amax, a);
    }
    const int e = ref::mx_exponent(amax, rceil);
    ASSERT_EQ(s[b], e) << "block " << b << " amax " << amax << (rceil ? " RCEIL" : " FLOOR");
    const double m = ref::mx_multiplier(e, rceil);
    for (std::int64_t i = 32 * b; i < 32 * b + 32; ++i) {
      const std::uint8_t code = (q[i / 2] >> (4 * (i % 2))) & 0xf;
      const std::uint8_t want = e == 255 ? 0x7 : ref::cast(static_cast<float>(x.as_float(i) * m));
      ASSERT_EQ(code, want) << "element " << i << " = " << x.as_float(i) << " e " << e;
    }
  }
  for (const DType out_dtype : kDTypes) {
    Typed out(out_dtype, n);
    dequantize_mxfp4_(q.data(), s.data(), 64, out.view());
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint8_t code = (q[i / 2] >> (4 * (i % 2))) & 0xf;
      const int e = s[i / 32];
      const float want = e == 255 ? NAN : static_cast<float>(ref::decode(code) * std::ldexp(1.0, e - 127));
      if (e == 255) {
        ASSERT_TRUE(std::isnan(out.value(i))) << i;
      } else {
        ASSERT_EQ(out.bits(i), bits_in(out_dtype, want)) << "element " << i;
      }
    }
  }
}

TEST(Mxfp4Test, FloorAndRceilFollowTorchaosRulesExactly) {
  fp8_reference::for_each_backend([&](const std::string& backend) {
    SCOPED_TRACE(backend);  // every compiled SIMD target (fp4_simd.cpp)
    for (const DType dtype : kDTypes) {
      for (const int threads : {1, 2}) {
        ThreadCount count(threads);
        const Typed x = typed(dtype, hostile_values(64, 64, true, 6));
        check_mxfp4(x, false);
        check_mxfp4(x, true);
      }
    }
  });
}

TEST(Mxfp4Test, TheSimdCastIsTheScalarOneForEveryBf16PatternUpToSix) {
  // RCEIL blocks whose amax is 6 have the multiplier 1: their codes are the SIMD loop's cast of
  // the elements themselves, held against float_to_e2m1 (checked against the reference above)
  // for every bf16 pattern of magnitude <= 6, NaN aside, on every compiled target.
  std::vector<float> v;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = ref::from_bits32(b << 16);
    if (std::isnan(x) || std::fabs(x) > 6.0f) continue;
    if (v.size() % 32 == 0) v.push_back(6.0f);
    v.push_back(x);
  }
  while (v.size() % 32 != 0) v.push_back(6.0f);
  const auto n = static_cast<std::int64_t>(v.size());
  fp8_reference::for_each_backend([&](const std::string& backend) {
    SCOPED_TRACE(backend);
    std::vector<std::uint8_t> q(v.size() / 2), s(v.size() / 32);
    quantize_mxfp4_({v.data(), n, DType::kFloat32}, 32, q.data(), s.data(), MxScaleMode::kRceil);
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(s[i / 32], 127);
      ASSERT_EQ((q[i / 2] >> (4 * (i % 2))) & 0xf, float_to_e2m1(v[i])) << v[i];
    }
  });
}

TEST(Mxfp4Test, ScaleCodesOfTheSpecTable) {
  // fp4.md: block amax 6 / 7 / inf gives FLOOR 127 / 127 / 253 and RCEIL 127 / 128 / 254; an
  // all-zero block 0; NaN 255.
  EXPECT_EQ(mxfp4_block_exponent(6.0f, MxScaleMode::kFloor), 127);
  EXPECT_EQ(mxfp4_block_exponent(7.0f, MxScaleMode::kFloor), 127);
  EXPECT_EQ(mxfp4_block_exponent(INFINITY, MxScaleMode::kFloor), 253);
  EXPECT_EQ(mxfp4_block_exponent(6.0f, MxScaleMode::kRceil), 127);
  EXPECT_EQ(mxfp4_block_exponent(7.0f, MxScaleMode::kRceil), 128);
  EXPECT_EQ(mxfp4_block_exponent(INFINITY, MxScaleMode::kRceil), 254);
  EXPECT_EQ(mxfp4_block_exponent(0.0f, MxScaleMode::kRceil), 0);
  EXPECT_EQ(mxfp4_block_exponent(0.0f, MxScaleMode::kFloor), 0);
  EXPECT_EQ(mxfp4_block_exponent(NAN, MxScaleMode::kRceil), 255);
  // Just above 6 * 2^k RCEIL rounds up exactly (torchao's float32 log2 can miss this).
  for (int k = -20; k <= 20; ++k) {
    const float a = std::nextafter(6.0f * std::ldexp(1.0f, k), INFINITY);
    EXPECT_EQ(mxfp4_block_exponent(a, MxScaleMode::kRceil), 127 + k + 1) << k;
  }
}

}  // namespace
}  // namespace mixprec::core
