// mixprec::fp4's functional ops (api.md) against the rules written out in this file from their
// sources (docs/fp4.md: Transformer Engine >= 2.14 for NVFP4, torchao 0.18's to_mx for MXFP4),
// never against the core's functions: hand-computed blocks, a scalar reference over random
// tensors, exact round trips, the packed layout, 2D tiles, strides, dtypes and the errors.
// Compiled only with LibTorch >= 2.1 (tests/torch/CMakeLists.txt: MIXPREC_WITH_FP8).
#include "mixprec/fp4.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "torch/test_util.h"

namespace {

namespace fp4 = mixprec::fp4;
using fp4::MxScaleMode;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFltMax = std::numeric_limits<float>::max();

// ---- The rules, written out ---------------------------------------------------------------------

/// E2M1's magnitudes, codes 0-7; codes 8-15 are their negatives.
constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/// The E2M1 code of v: the nearest magnitude, a tie to the even code, saturating at 6 (inf too);
/// the sign kept (-0 is 0x8); NaN is 0x7, as TE's cvt.rn.satfinite.
std::uint8_t e2m1_code(float v) {
  if (std::isnan(v)) return 0x7;
  const std::uint8_t sign = std::signbit(v) ? 0x8 : 0x0;
  const double a = std::fabs(static_cast<double>(v));
  if (a >= 6.0) return sign | 0x7;
  std::uint8_t best = 0;
  for (std::uint8_t c = 1; c < 8; ++c) {
    const double d = std::fabs(a - kE2m1[c]), d_best = std::fabs(a - kE2m1[best]);
    if (d < d_best || (d == d_best && c % 2 == 0)) best = c;
  }
  return sign | best;
}

float e2m1_value(std::uint8_t code) {
  const float m = kE2m1[code & 0x7];
  return (code & 0x8) != 0 ? -m : m;
}

/// E4M3 bits of each value (nonnegative), rounded to nearest even by PyTorch's own cast after
/// saturating at 448 (PyTorch before 2.12 gives NaN past it).
std::vector<std::uint8_t> e4m3_bits(const std::vector<float>& v) {
  const at::Tensor t = torch::tensor(v, torch::kFloat).clamp_max(448.0).to(at::kFloat8_e4m3fn);
  const at::Tensor b = t.view(at::kByte).contiguous();
  return std::vector<std::uint8_t>(b.data_ptr<std::uint8_t>(),
                                   b.data_ptr<std::uint8_t>() + b.numel());
}

float e4m3_value(std::uint8_t bits) {
  return torch::full({1}, static_cast<std::int64_t>(bits), torch::kByte)
      .view(at::kFloat8_e4m3fn)
      .to(torch::kFloat)
      .item<float>();
}

/// The bytes of a 1-byte-element tensor (uint8, float4_e2m1fn_x2, float8) in row-major order.
std::vector<std::uint8_t> bytes_of(const at::Tensor& t) {
  const at::Tensor b = t.view(at::kByte).contiguous().cpu();
  return std::vector<std::uint8_t>(b.data_ptr<std::uint8_t>(),
                                   b.data_ptr<std::uint8_t>() + b.numel());
}

/// The E2M1 codes of packed data, two a byte, the even element from the low nibble.
std::vector<std::uint8_t> unpack(const at::Tensor& data) {
  std::vector<std::uint8_t> codes;
  for (const std::uint8_t b : bytes_of(data)) {
    codes.push_back(b & 0xf);
    codes.push_back(b >> 4);
  }
  return codes;
}

/// NVFP4 as TE >= 2.14 computes it (core_nvfp4.cuh, reference_nvfp4.py; docs/fp4.md), in
/// float32, over a [rows, cols] float32 tensor:
///   A = max |x| without NaN;  S_enc = min(fl(2688 / A), FLT_MAX), 1 when A == 0 or S_enc == 0;
///   S_dec = fl(1 / S_enc);  per block (16 of a row, or a 16 x 16 tile) with amax_b (no NaN):
///   s_b = e4m3(min(amax_b * fl(S_enc * fl(1/6)), FLT_MAX)), saturating at 448;
///   enc_b = min(fl(1 / fl(s_b * S_dec)), FLT_MAX);  q = e2m1(fl(x * enc_b)).
struct Nvfp4Ref {
  float amax = 0;
  std::vector<std::uint8_t> codes;   // one per element
  std::vector<std::uint8_t> scales;  // one per row and block
};

float abs_max_skip_nan(float a, float v) { return std::isnan(v) ? a : std::max(a, std::fabs(v)); }

Nvfp4Ref nvfp4_reference(const at::Tensor& x2d, bool two_d) {
  const at::Tensor x = x2d.to(torch::kFloat).contiguous();
  const std::int64_t rows = x.size(0), cols = x.size(1), per_row = cols / 16;
  const float* v = x.data_ptr<float>();
  Nvfp4Ref r;
  for (std::int64_t i = 0; i < x.numel(); ++i) r.amax = abs_max_skip_nan(r.amax, v[i]);
  float s_enc = std::min(2688.0f / r.amax, kFltMax);
  if (r.amax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
  const float s_dec = 1.0f / s_enc;
  const float factor = s_enc * (1.0f / 6.0f);
  std::vector<float> pre(rows * per_row);
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t b = 0; b < per_row; ++b) {
      const std::int64_t first = two_d ? row / 16 * 16 : row, last = two_d ? first + 16 : row + 1;
      float amax_b = 0;
      for (std::int64_t rr = first; rr < last; ++rr) {
        for (std::int64_t c = b * 16; c < b * 16 + 16; ++c)
          amax_b = abs_max_skip_nan(amax_b, v[rr * cols + c]);
      }
      pre[row * per_row + b] = std::min(amax_b * factor, kFltMax);
    }
  }
  r.scales = e4m3_bits(pre);
  r.codes.resize(x.numel());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const std::uint8_t s_b = r.scales[i / 16];
    const float enc = std::min(1.0f / (e4m3_value(s_b) * s_dec), kFltMax);
    r.codes[i] = e2m1_code(v[i] * enc);
  }
  return r;
}

/// torchao 0.18's to_mx(x, float4_e2m1fn_x2, 32, mode) exponent of a block amax (NaN propagates):
///   FLOOR: floor(log2 amax) - 2 from the exponent bits (ilogb; a subnormal or zero amax clamps),
///          clamped to [-127, 128];
///   RCEIL: ceil(log2(fl(amax / 6))), clamped to [-127, 127];  both biased by 127, NaN 255.
std::uint8_t mx_exponent(float amax, MxScaleMode mode) {
  if (std::isnan(amax)) return 255;
  if (mode == MxScaleMode::kFloor) {
    if (std::isinf(amax)) return 128 - 2 + 127;
    const int e = amax == 0.0f ? -127 : std::ilogb(amax) - 2;
    return static_cast<std::uint8_t>(std::clamp(e, -127, 128) + 127);
  }
  if (std::isinf(amax)) return 127 + 127;
  const float d = amax / 6.0f;
  if (d == 0.0f) return 0;
  int k = 0;
  const float m = std::frexp(d, &k);  // d = m * 2^k, m in [0.5, 1): ceil(log2 d) = k, or k - 1
  const int e = m == 0.5f ? k - 1 : k;
  return static_cast<std::uint8_t>(std::clamp(e, -127, 127) + 127);
}

/// What a block's elements are multiplied by before the E2M1 cast: x / 2^(e - 127); torchao's
/// FLOOR divides by 2^-126 for e = 0 (its clamp to the smallest normal), RCEIL multiplies by 1.
float mx_multiplier(std::uint8_t e, MxScaleMode mode) {
  if (e == 255) return kNaN;
  if (e == 0) return mode == MxScaleMode::kFloor ? std::ldexp(1.0f, 126) : 1.0f;
  return std::ldexp(1.0f, 127 - e);
}

struct Mxfp4Ref {
  std::vector<std::uint8_t> codes, scales;
};

Mxfp4Ref mxfp4_reference(const at::Tensor& x_in, MxScaleMode mode) {
  const at::Tensor x = x_in.to(torch::kFloat).contiguous();
  const float* v = x.data_ptr<float>();
  Mxfp4Ref r;
  r.codes.resize(x.numel());
  for (std::int64_t b = 0; b < x.numel() / 32; ++b) {
    float amax = 0;
    for (std::int64_t i = b * 32; i < b * 32 + 32; ++i) {
      amax = std::isnan(v[i]) || std::isnan(amax) ? kNaN : std::max(amax, std::fabs(v[i]));
    }
    const std::uint8_t e = mx_exponent(amax, mode);
    r.scales.push_back(e);
    for (std::int64_t i = b * 32; i < b * 32 + 32; ++i)
      r.codes[i] = e2m1_code(v[i] * mx_multiplier(e, mode));
  }
  return r;
}

/// Rows of blocks `block` wide whose magnitudes spread over 2^-14..2^14, so that the scales take
/// many values (NVFP4: subnormal and zero E4M3 scales too), with one block all zero.
at::Tensor spread(std::int64_t rows, std::int64_t cols, std::int64_t block) {
  const at::Tensor exponents = torch::randint(-14, 15, {rows, cols / block, 1}).to(torch::kFloat);
  at::Tensor x =
      (torch::randn({rows, cols / block, block}) * at::exp2(exponents)).reshape({rows, cols});
  x[0].narrow(0, 0, block).zero_();
  return x;
}

// ---- Layout -------------------------------------------------------------------------------------

TEST(Fp4Test, PackedLayoutShapesAndDtypes) {
#if MIXPREC_TORCH_FLOAT4
  EXPECT_EQ(fp4::kPackedDtype, at::kFloat4_e2m1fn_x2);
#else
  EXPECT_EQ(fp4::kPackedDtype, at::kByte);
#endif
  const at::Tensor x = torch::randn({3, 5, 32});
  const fp4::Nvfp4Tensor n = fp4::quantize_nvfp4(x);
  EXPECT_EQ(n.data.sizes(), at::IntArrayRef({3, 5, 16}));
  EXPECT_EQ(n.data.scalar_type(), fp4::kPackedDtype);
  EXPECT_EQ(n.block_scales.sizes(), at::IntArrayRef({3, 5, 2}));
  EXPECT_EQ(n.block_scales.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_EQ(n.amax.sizes(), at::IntArrayRef({1}));
  EXPECT_EQ(n.amax.scalar_type(), at::kFloat);
  EXPECT_EQ(n.amax.item<float>(), x.abs().max().item<float>());
  EXPECT_EQ(fp4::dequantize_nvfp4(n, at::kFloat).sizes(), x.sizes());

  const fp4::Mxfp4Tensor m = fp4::quantize_mxfp4(torch::randn({2, 3, 64}));
  EXPECT_EQ(m.data.sizes(), at::IntArrayRef({2, 3, 32}));
  EXPECT_EQ(m.data.scalar_type(), fp4::kPackedDtype);
  EXPECT_EQ(m.scales.sizes(), at::IntArrayRef({2, 3, 2}));
  EXPECT_EQ(m.scales.scalar_type(), at::kByte);
  EXPECT_EQ(fp4::dequantize_mxfp4(m, at::kHalf).sizes(), at::IntArrayRef({2, 3, 64}));
}

TEST(Fp4Test, TheEvenElementIsTheLowNibble) {
  // Block amax 6: scale 2^0 (E8M0 127), the elements are their own codes.
  at::Tensor x = torch::zeros({1, 32});
  x[0][0] = 0.5;  // code 1
  x[0][1] = 6.0;  // code 7
  x[0][2] = -1;   // code 0xA
  x[0][3] = 3;    // code 5
  const fp4::Mxfp4Tensor m = fp4::quantize_mxfp4(x);
  const std::vector<std::uint8_t> data = bytes_of(m.data);
  EXPECT_EQ(data[0], 0x71);
  EXPECT_EQ(data[1], 0x5A);
  EXPECT_EQ(bytes_of(m.scales)[0], 127);
  const at::Tensor back = fp4::dequantize_mxfp4(m, at::kFloat);
  EXPECT_TRUE(back.equal(x)) << back;
}

// ---- NVFP4: TE's rules --------------------------------------------------------------------------

TEST(Fp4Test, Nvfp4HandComputedBlocks) {
  // Worked out by hand from the formulas above. One row of six blocks; A = 2688 (block 1), so
  // S_enc = S_dec = 1 and fl(S_enc * fl(1/6)) = fl(1/6).
  std::vector<float> v(96, 0.0f);
  // Block 0, amax 6: s_b = e4m3(fl(6 * fl(1/6)) = 1) = 0x38, enc 1: the ties of E2M1, each to
  // the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
  const float ties[8] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
  for (int i = 0; i < 8; ++i) {
    v[i] = ties[i];
    v[8 + i] = -ties[i];
  }
  // Block 1, amax 2688: fl(2688 * fl(1/6)) > 448 saturates to 0x7E; 2688 * fl(1/448) -> code 7.
  v[16] = 2688.0f;
  // Block 2, amax 2^-20: s_b rounds to 0 (below 2^-10, half E4M3's smallest subnormal), so enc is
  // FLT_MAX and the nonzero elements become +-6 (TE's codes), which dequantize to 0.
  v[32] = 0x1p-20f;
  v[33] = -0x1p-20f;
  // Block 3: all zero, s_b 0, codes 0.
  // Block 4, amax 3: s_b = e4m3(0.50000001) = 0.5 (0x30), enc 2: 6 -> 7, -3 -> 0xD, 1.5 -> 3,
  // 0.25 -> 0, 3.5 -> 4 (code 6), 5 -> 4 (code 6), 0.6 -> 0.5 (code 1), 2.2 -> 2 (code 4).
  const float b4[8] = {3.0f, -1.5f, 0.75f, 0.125f, 1.75f, 2.5f, 0.3f, 1.1f};
  for (int i = 0; i < 8; ++i) v[64 + i] = b4[i];
  // Block 5, amax 5: 5 * fl(1/6) = 0.8333 rounds to E4M3 0.8125 (0x35; 0.875 is farther), enc =
  // fl(1/0.8125) = 1.2308: 5 -> 6.15 -> code 7, 1 -> 1.23 -> code 2.
  v[80] = 5.0f;
  v[81] = 1.0f;
  const at::Tensor x = torch::tensor(v).reshape({1, 96});

  const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(x);
  EXPECT_EQ(q.amax.item<float>(), 2688.0f);
  EXPECT_EQ(bytes_of(q.block_scales),
            (std::vector<std::uint8_t>{0x38, 0x7E, 0x00, 0x00, 0x30, 0x35}));
  std::vector<std::uint8_t> expected(48, 0);
  const std::uint8_t b0[8] = {0x20, 0x42, 0x64, 0x76, 0xA8, 0xCA, 0xEC, 0xFE};
  std::copy(b0, b0 + 8, expected.begin());
  expected[8] = 0x07;
  expected[16] = 0xF7;
  const std::uint8_t b4_bytes[4] = {0xD7, 0x03, 0x66, 0x41};
  std::copy(b4_bytes, b4_bytes + 4, expected.begin() + 32);
  expected[40] = 0x27;
  EXPECT_EQ(bytes_of(q.data), expected);

  // Dequantize: e2m1 * s_b * A / 2688, here s_b exactly (A = 2688).
  const at::Tensor back = fp4::dequantize_nvfp4(q, at::kFloat).reshape({96});
  std::vector<float> want(96, 0.0f);
  const float b0_back[8] = {0, 1, 1, 2, 2, 4, 4, 6};
  for (int i = 0; i < 8; ++i) {
    want[i] = b0_back[i];
    want[8 + i] = -b0_back[i];
  }
  want[16] = 2688.0f;
  want[33] = -0.0f;
  const float b4_back[8] = {3.0f, -1.5f, 0.75f, 0.0f, 2.0f, 2.0f, 0.25f, 1.0f};
  for (int i = 0; i < 8; ++i) want[64 + i] = b4_back[i];
  want[80] = 4.875f;
  want[81] = 0.8125f;
  EXPECT_TRUE(back.equal(torch::tensor(want))) << back;
  EXPECT_TRUE(std::signbit(back[33].item<float>()));
}

TEST(Fp4Test, Nvfp4MatchesTheRulesWrittenOutOnRandomTensors) {
  torch::manual_seed(0);
  for (const bool two_d : {false, true}) {
    at::Tensor with_nan = spread(32, 64, 16);
    with_nan[3][5] = kNaN;  // left out of both amaxes, coded 0x7
    at::Tensor with_inf = spread(32, 64, 16);
    with_inf[17][40] = -kInf;  // A = inf: S_enc = 1
    for (const at::Tensor& x :
         {spread(32, 64, 16), spread(48, 32, 16) * 1e-30, with_nan, with_inf}) {
      const Nvfp4Ref ref = nvfp4_reference(x, two_d);
      const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(x, two_d);
      ASSERT_EQ(q.amax.item<float>(), ref.amax);
      EXPECT_EQ(bytes_of(q.block_scales), ref.scales) << "two_d " << two_d;
      EXPECT_EQ(unpack(q.data), ref.codes) << "two_d " << two_d;
      if (!std::isfinite(ref.amax)) continue;
      // Dequantize: e2m1 * s_b * A / 2688, within two float roundings.
      const at::Tensor back = fp4::dequantize_nvfp4(q, at::kFloat).reshape({-1});
      for (std::int64_t i = 0; i < back.numel(); ++i) {
        const double want = static_cast<double>(e2m1_value(ref.codes[i])) *
                            e4m3_value(ref.scales[i / 16]) * ref.amax / 2688.0;
        ASSERT_NEAR(back[i].item<float>(), want, std::fabs(want) * 0x1p-22 + 1e-45) << i;
      }
    }
  }
}

TEST(Fp4Test, TwoDTilesRepeatTheirScaleInTheirSixteenRows) {
  // By hand: one 16 x 32 matrix, A = 2688. Tile 0 holds 2688 (row 0) and 6 (row 15): every row's
  // scale is the tile's 0x7E, so row 15's 6 becomes 6 * fl(1/448) -> code 0, where 1D scaling
  // gives that row 0x38 and code 7. Tile 1 holds only 3 (row 5): 0x30 in all 16 rows (1D: 0 in
  // the other rows).
  at::Tensor x = torch::zeros({16, 32});
  x[0][0] = 2688.0f;
  x[15][3] = 6.0f;
  x[5][20] = 3.0f;
  const fp4::Nvfp4Tensor q2 = fp4::quantize_nvfp4(x, /*two_d=*/true);
  const std::vector<std::uint8_t> s2 = bytes_of(q2.block_scales);
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(s2[r * 2], 0x7E) << r;
    EXPECT_EQ(s2[r * 2 + 1], 0x30) << r;
  }
  EXPECT_EQ(unpack(q2.data)[15 * 32 + 3], 0x0);
  const fp4::Nvfp4Tensor q1 = fp4::quantize_nvfp4(x);
  EXPECT_EQ(bytes_of(q1.block_scales)[15 * 2], 0x38);
  EXPECT_EQ(bytes_of(q1.block_scales)[0 * 2 + 1], 0x00);
  EXPECT_EQ(unpack(q1.data)[15 * 32 + 3], 0x7);

  // Random batches of matrices: tiles per matrix of the last two dims, each repeated in its rows.
  torch::manual_seed(2);
  const at::Tensor batch = spread(64, 48, 16).reshape({2, 32, 48});
  const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(batch, /*two_d=*/true);
  ASSERT_EQ(q.block_scales.sizes(), at::IntArrayRef({2, 32, 3}));
  const std::vector<std::uint8_t> s = bytes_of(q.block_scales);
  const Nvfp4Ref ref = nvfp4_reference(batch.reshape({64, 48}), /*two_d=*/true);
  EXPECT_EQ(s, ref.scales);
  EXPECT_EQ(unpack(q.data), ref.codes);
  for (std::int64_t row = 0; row < 64; ++row) {
    for (std::int64_t j = 0; j < 3; ++j) EXPECT_EQ(s[row * 3 + j], s[row / 16 * 16 * 3 + j]) << row;
  }
  EXPECT_NE(s, bytes_of(fp4::quantize_nvfp4(batch).block_scales));  // not 1D scales after all
}

// ---- MXFP4: torchao's rules ---------------------------------------------------------------------

TEST(Fp4Test, Mxfp4HandComputedBlocks) {
  // Six blocks of 32 in a row. Block amax 7: FLOOR e = floor(log2 7) - 2 = 0 (127), 7 saturates
  // to 6; RCEIL e = ceil(log2(7/6)) = 1 (128), 3.5 ties to 4. Amax 1000: FLOOR 9 - 2 = 7 (134):
  // 7.8125 -> 6, 0.78125 -> 1; RCEIL ceil(log2 166.7) = 8 (135): 3.906 -> 4, 0.39 -> 0.5. inf:
  // FLOOR 253, RCEIL 254, code 7. NaN: 255, every code 7. Zero: 0. Amax 6: 127 both, -0.25 ties
  // to -0 (0x8), 0.75 to 1.
  std::vector<float> v(192, 0.0f);
  v[0] = 7.0f;
  v[1] = 1.0f;
  v[32] = 1000.0f;
  v[33] = 100.0f;
  v[64] = kInf;
  v[65] = 1.0f;
  v[96] = kNaN;
  v[97] = 1.0f;
  v[160] = 6.0f;
  v[161] = -0.25f;
  v[162] = 0.75f;
  const at::Tensor x = torch::tensor(v).reshape({1, 192});
  struct Case {
    MxScaleMode mode;
    std::vector<std::uint8_t> scales;
    std::uint8_t b0, b1;  // the first bytes of blocks 0 and 1
    float back0, back1, back32, back33;
  };
  const Case cases[] = {
      {MxScaleMode::kFloor, {127, 134, 253, 255, 0, 127}, 0x27, 0x27, 6.0f, 1.0f, 768.0f, 128.0f},
      {MxScaleMode::kRceil, {128, 135, 254, 255, 0, 127}, 0x16, 0x16, 8.0f, 1.0f, 1024.0f, 128.0f},
  };
  for (const Case& c : cases) {
    const fp4::Mxfp4Tensor q = fp4::quantize_mxfp4(x, c.mode);
    EXPECT_EQ(bytes_of(q.scales), c.scales);
    std::vector<std::uint8_t> expected(96, 0);
    expected[0] = c.b0;
    expected[16] = c.b1;
    expected[32] = 0x07;
    std::fill(expected.begin() + 48, expected.begin() + 64, 0x77);
    expected[80] = 0x87;
    expected[81] = 0x02;
    EXPECT_EQ(bytes_of(q.data), expected);
    const at::Tensor back = fp4::dequantize_mxfp4(q, at::kFloat).reshape({192});
    EXPECT_EQ(back[0].item<float>(), c.back0);
    EXPECT_EQ(back[1].item<float>(), c.back1);
    EXPECT_EQ(back[32].item<float>(), c.back32);
    EXPECT_EQ(back[33].item<float>(), c.back33);
    EXPECT_TRUE(back.narrow(0, 96, 32).isnan().all().item<bool>());  // scale 255: all NaN
    EXPECT_EQ(back[160].item<float>(), 6.0f);
    EXPECT_TRUE(std::signbit(back[161].item<float>()));
  }
}

TEST(Fp4Test, Mxfp4MatchesTheRulesWrittenOutOnRandomTensors) {
  torch::manual_seed(1);
  at::Tensor x = spread(24, 128, 32);
  x[1][40] = kNaN;
  x[2][100] = -kInf;
  x[3].narrow(0, 0, 32).mul_(1e-39);  // a subnormal amax
  x[4].narrow(0, 32, 32).mul_(1e30);
  for (const MxScaleMode mode : {MxScaleMode::kFloor, MxScaleMode::kRceil}) {
    const Mxfp4Ref ref = mxfp4_reference(x, mode);
    const fp4::Mxfp4Tensor q = fp4::quantize_mxfp4(x, mode);
    EXPECT_EQ(bytes_of(q.scales), ref.scales);
    ASSERT_EQ(unpack(q.data), ref.codes);
    // Dequantize: e2m1 * 2^(e - 127), exact in float32 (NaN for e = 255).
    const at::Tensor back = fp4::dequantize_mxfp4(q, at::kFloat).reshape({-1});
    for (std::int64_t i = 0; i < back.numel(); ++i) {
      const std::uint8_t e = ref.scales[i / 32];
      const float want = e == 255 ? kNaN : std::ldexp(e2m1_value(ref.codes[i]), e - 127);
      const float got = back[i].item<float>();
      ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << i << ": " << got;
    }
  }
}

// ---- Round trips, strides, dtypes ---------------------------------------------------------------

/// E2M1 values times a power of two 2^k, one k (in [lo, hi]) per block of `block` elements of
/// `tile_rows` rows, each block holding a 6 * 2^k so that its scale is exact.
at::Tensor e2m1_times_powers(std::int64_t rows, std::int64_t cols, std::int64_t tile_rows,
                             std::int64_t block, int lo, int hi) {
  const at::Tensor magnitudes = torch::tensor(std::vector<float>(kE2m1, kE2m1 + 8));
  const at::Tensor all = torch::cat({magnitudes, -magnitudes});  // codes 0-15
  at::Tensor v = all.index_select(0, torch::randint(0, 16, {rows * cols}))
                     .reshape({rows / tile_rows, tile_rows, cols / block, block});
  v.select(1, 0).select(2, 0).fill_(6.0f);
  const at::Tensor k = torch::randint(lo, hi + 1, {rows / tile_rows, 1, cols / block, 1});
  return (v * at::exp2(k.to(torch::kFloat))).reshape({rows, cols});
}

TEST(Fp4Test, PowerOfTwoMultiplesOfE2m1RoundTripExactly) {
  torch::manual_seed(3);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const bool half = dtype == at::kHalf;
    // MXFP4: such a block's scale is its power of two, in both modes.
    const at::Tensor mx =
        e2m1_times_powers(8, 128, 1, 32, half ? -12 : -30, half ? 13 : 30).to(dtype);
    for (const MxScaleMode mode : {MxScaleMode::kFloor, MxScaleMode::kRceil}) {
      const at::Tensor back = fp4::dequantize_mxfp4(fp4::quantize_mxfp4(mx, mode), dtype);
      EXPECT_EQ(back.scalar_type(), dtype);
      EXPECT_TRUE(back.equal(mx)) << dtype;
    }
    // NVFP4: with A = 2688 * 2^m (S_enc = 2^-m) a block (or tile) of amax 6 * 2^k has s_b =
    // 2^(k - m), exact where that is an E4M3 value (k - m in [-9, 8]), and the element 2688 *
    // 2^m, alone in its tile, comes back too (s_b 448).
    const int m = half ? 3 : 10;
    for (const bool two_d : {false, true}) {
      at::Tensor nv = e2m1_times_powers(32, 64, two_d ? 16 : 1, 16, m - 9, m + 3);
      nv.narrow(0, 0, 16).narrow(1, 16, 16).zero_();
      nv[0][17] = std::ldexp(2688.0f, m);
      nv = nv.to(dtype);
      const at::Tensor back = fp4::dequantize_nvfp4(fp4::quantize_nvfp4(nv, two_d), dtype);
      EXPECT_TRUE(back.equal(nv)) << dtype << " two_d " << two_d;
    }
  }
}

TEST(Fp4Test, NonContiguousInputsGiveTheContiguousResult) {
  torch::manual_seed(4);
  const at::Tensor base = spread(64, 96, 32);
  const at::Tensor transposed = base.t();                               // [96, 64], column-major
  const at::Tensor strided = base.narrow(1, 0, 64).slice(0, 0, 64, 2);  // every other row
  for (const at::Tensor& x : {transposed, strided}) {
    ASSERT_FALSE(x.is_contiguous());
    const at::Tensor c = x.contiguous();
    for (const bool two_d : {false, true}) {
      const fp4::Nvfp4Tensor a = fp4::quantize_nvfp4(x, two_d), b = fp4::quantize_nvfp4(c, two_d);
      EXPECT_EQ(bytes_of(a.data), bytes_of(b.data));
      EXPECT_EQ(bytes_of(a.block_scales), bytes_of(b.block_scales));
      EXPECT_TRUE(a.amax.equal(b.amax));
    }
    const fp4::Mxfp4Tensor a = fp4::quantize_mxfp4(x), b = fp4::quantize_mxfp4(c);
    EXPECT_EQ(bytes_of(a.data), bytes_of(b.data));
    EXPECT_EQ(bytes_of(a.scales), bytes_of(b.scales));
  }
  // Dequantize of strided data and scales (every other row of a quantized tensor).
  const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(base);
  const fp4::Nvfp4Tensor rows{q.data.slice(0, 0, 64, 2), q.block_scales.slice(0, 0, 64, 2), q.amax};
  EXPECT_TRUE(fp4::dequantize_nvfp4(rows, at::kFloat)
                  .equal(fp4::dequantize_nvfp4(q, at::kFloat).slice(0, 0, 64, 2)));
  const fp4::Mxfp4Tensor mq = fp4::quantize_mxfp4(base);
  const fp4::Mxfp4Tensor mrows{mq.data.slice(0, 1, 64, 2), mq.scales.slice(0, 1, 64, 2)};
  EXPECT_TRUE(fp4::dequantize_mxfp4(mrows, at::kFloat)
                  .equal(fp4::dequantize_mxfp4(mq, at::kFloat).slice(0, 1, 64, 2)));
}

TEST(Fp4Test, Bf16AndFp16InputsAndOutputs) {
  torch::manual_seed(5);
  for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    // Values that dtype holds exactly: the same codes as from their float32 copy.
    const at::Tensor x = (torch::randn({16, 64}) * 100).to(dtype);
    const at::Tensor xf = x.to(torch::kFloat);
    const fp4::Nvfp4Tensor a = fp4::quantize_nvfp4(x, true), b = fp4::quantize_nvfp4(xf, true);
    EXPECT_EQ(bytes_of(a.data), bytes_of(b.data)) << dtype;
    EXPECT_EQ(bytes_of(a.block_scales), bytes_of(b.block_scales)) << dtype;
    EXPECT_TRUE(a.amax.equal(b.amax)) << dtype;
    const Nvfp4Ref ref = nvfp4_reference(xf, true);
    EXPECT_EQ(unpack(a.data), ref.codes) << dtype;
    for (const MxScaleMode mode : {MxScaleMode::kFloor, MxScaleMode::kRceil}) {
      EXPECT_EQ(bytes_of(fp4::quantize_mxfp4(x, mode).data),
                bytes_of(fp4::quantize_mxfp4(xf, mode).data));
    }
    // Out: one rounding of the float32 result to dtype.
    const at::Tensor out = fp4::dequantize_nvfp4(a, dtype);
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_TRUE(out.equal(fp4::dequantize_nvfp4(a, at::kFloat).to(dtype))) << dtype;
    const fp4::Mxfp4Tensor m = fp4::quantize_mxfp4(x);
    EXPECT_TRUE(
        fp4::dequantize_mxfp4(m, dtype).equal(fp4::dequantize_mxfp4(m, at::kFloat).to(dtype)));
  }
}

TEST(Fp4Test, DequantizeTakesUint8OrPackedData) {
  torch::manual_seed(6);
  const at::Tensor x = torch::randn({4, 64});
  const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(x);
  const fp4::Nvfp4Tensor as_bytes{q.data.view(at::kByte), q.block_scales, q.amax};
  EXPECT_TRUE(
      fp4::dequantize_nvfp4(as_bytes, at::kFloat).equal(fp4::dequantize_nvfp4(q, at::kFloat)));
  const fp4::Mxfp4Tensor m = fp4::quantize_mxfp4(x);
  const fp4::Mxfp4Tensor m_bytes{m.data.view(at::kByte), m.scales};
  EXPECT_TRUE(
      fp4::dequantize_mxfp4(m_bytes, at::kFloat).equal(fp4::dequantize_mxfp4(m, at::kFloat)));
  // amax may be any 1-element float32 tensor (0-dim here).
  const fp4::Nvfp4Tensor scalar_amax{q.data, q.block_scales, q.amax.reshape({})};
  EXPECT_TRUE(
      fp4::dequantize_nvfp4(scalar_amax, at::kFloat).equal(fp4::dequantize_nvfp4(q, at::kFloat)));
}

TEST(Fp4Test, EmptyTensors) {
  for (const auto& shape : {std::vector<std::int64_t>{0, 32}, std::vector<std::int64_t>{4, 0}}) {
    const at::Tensor x = torch::zeros(shape);
    const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(x);
    EXPECT_EQ(q.data.sizes(), at::IntArrayRef({shape[0], shape[1] / 2}));
    EXPECT_EQ(q.block_scales.sizes(), at::IntArrayRef({shape[0], shape[1] / 16}));
    EXPECT_EQ(q.amax.item<float>(), 0.0f);
    EXPECT_EQ(fp4::dequantize_nvfp4(q, at::kFloat).sizes(), x.sizes());
    const fp4::Mxfp4Tensor m = fp4::quantize_mxfp4(x);
    EXPECT_EQ(m.scales.sizes(), at::IntArrayRef({shape[0], shape[1] / 32}));
    EXPECT_EQ(fp4::dequantize_mxfp4(m, at::kBFloat16).sizes(), x.sizes());
  }
}

// ---- Errors -------------------------------------------------------------------------------------

TEST(Fp4Test, QuantizeArgumentErrors) {
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(torch::ones({})), "at least one dimension");
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(torch::ones({4, 20})),
                    "fp4::quantize_nvfp4: the last dimension (size 20) must be a multiple of 16, "
                    "the NVFP4 block size");
  EXPECT_THROW_WITH(fp4::quantize_mxfp4(torch::ones({2, 48})),
                    "the last dimension (size 48) must be a multiple of 32, the MXFP4 block size");
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(torch::ones({2, 8, 32}), true),
                    "two_d needs the second-to-last dimension (size 8) to be a multiple of 16");
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(torch::ones({32}), true), "needs at least two dimensions");
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(torch::ones({32}, torch::kDouble)),
                    "expected a float32, bfloat16 or float16 tensor, got Double");
  EXPECT_THROW_WITH(fp4::quantize_mxfp4(torch::ones({32}, torch::kInt)),
                    "fp4::quantize_mxfp4: expected a float32, bfloat16 or float16 tensor, got Int");
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(at::Tensor()), "expected a defined tensor");
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(torch::ones({2, 16}).to_sparse()), "strided (dense)");
  EXPECT_THROW_WITH(fp4::quantize_nvfp4(torch::ones({32}, torch::Device(torch::kMeta))),
                    "only CPU and CUDA tensors are supported");
  EXPECT_THROW_WITH(fp4::quantize_mxfp4(torch::ones({32}), static_cast<MxScaleMode>(7)),
                    "unsupported MxScaleMode 7");
}

TEST(Fp4Test, DequantizeRefusesTensorsThatDoNotFit) {
  const fp4::Nvfp4Tensor q = fp4::quantize_nvfp4(torch::randn({2, 32}));
  const auto nv = [&](at::Tensor data, at::Tensor scales, at::Tensor amax) {
    return fp4::dequantize_nvfp4(fp4::Nvfp4Tensor{data, scales, amax}, at::kFloat);
  };
  EXPECT_THROW_WITH(fp4::dequantize_nvfp4(q, at::kDouble),
                    "out_dtype must be float32, bfloat16 or float16, got Double");
  EXPECT_THROW_WITH(nv(q.data.view(at::kByte).to(torch::kFloat), q.block_scales, q.amax),
                    "data must be packed E2M1 of dtype Byte");
  EXPECT_THROW_WITH(nv(at::Tensor(), q.block_scales, q.amax), "data must be a defined tensor");
  EXPECT_THROW_WITH(nv(torch::zeros({}, torch::kByte), q.block_scales, q.amax), "0-dim");
  EXPECT_THROW_WITH(nv(torch::zeros({2, 12}, torch::kByte), q.block_scales, q.amax),
                    "data's last dimension (size 12) must be a multiple of 8");
  EXPECT_THROW_WITH(nv(q.data, q.block_scales.view(at::kByte), q.amax),
                    "block_scales must be of dtype Float8_e4m3fn");
  EXPECT_THROW_WITH(
      nv(q.data, q.block_scales.narrow(1, 0, 1), q.amax),
      "block_scales of shape [2, 1] do not fit data of shape [2, 16] (expected [2, 2]");
  EXPECT_THROW_WITH(nv(q.data, q.block_scales.reshape({4}), q.amax), "do not fit data of shape");
  EXPECT_THROW_WITH(nv(q.data.narrow(0, 0, 1), q.block_scales, q.amax), "do not fit data of shape");
  EXPECT_THROW_WITH(nv(q.data, at::Tensor(), q.amax), "block_scales must be a defined tensor");
  EXPECT_THROW_WITH(nv(q.data, q.block_scales, torch::ones({2})),
                    "amax must be a 1-element tensor, got 2 elements");
  EXPECT_THROW_WITH(nv(q.data, q.block_scales, torch::ones({1}, torch::kDouble)),
                    "amax must be a float tensor, got Double");
  EXPECT_THROW_WITH(nv(q.data, q.block_scales, at::Tensor()), "amax must be a defined tensor");
  EXPECT_THROW_WITH(nv(q.data, q.block_scales, torch::ones({1}, torch::Device(torch::kMeta))),
                    "Expected all tensors to be on the same device");
  EXPECT_THROW_WITH(nv(q.data, q.block_scales.to(torch::Device(torch::kMeta)), q.amax),
                    "Expected all tensors to be on the same device");
  EXPECT_THROW_WITH(
      nv(torch::zeros({2, 16}, torch::TensorOptions(torch::kByte).device(torch::kMeta)),
         q.block_scales, q.amax),
      "only CPU and CUDA tensors are supported");

  const fp4::Mxfp4Tensor m = fp4::quantize_mxfp4(torch::randn({2, 64}));
  const auto mx = [&](at::Tensor data, at::Tensor scales) {
    return fp4::dequantize_mxfp4(fp4::Mxfp4Tensor{data, scales}, at::kHalf);
  };
  EXPECT_THROW_WITH(fp4::dequantize_mxfp4(m, at::kLong), "out_dtype must be float32");
  EXPECT_THROW_WITH(mx(m.data, m.scales.view(at::kFloat8_e4m3fn)),
                    "fp4::dequantize_mxfp4: scales must be of dtype Byte");
  EXPECT_THROW_WITH(mx(m.data, m.scales.narrow(1, 0, 1)),
                    "scales of shape [2, 1] do not fit data of shape [2, 32] (expected [2, 2]");
  EXPECT_THROW_WITH(mx(torch::zeros({2, 24}, torch::kByte), m.scales),
                    "data's last dimension (size 24) must be a multiple of 16");
  EXPECT_THROW_WITH(mx(m.data, torch::zeros({2, 2}, torch::kByte).to_sparse()), "strided (dense)");
}

// ---- docs/fp4.md --------------------------------------------------------------------------------

TEST(Fp4Test, DocsExample) {
  torch::manual_seed(7);
  const at::Tensor w = torch::randn({256, 512});
  // NVFP4 with 16 x 16 tiles (TE's weights), back to bf16.
  const mixprec::fp4::Nvfp4Tensor q = mixprec::fp4::quantize_nvfp4(w, /*two_d=*/true);
  const at::Tensor w_nv = mixprec::fp4::dequantize_nvfp4(q, at::kBFloat16);
  // MXFP4 with torchao's RCEIL scales.
  const mixprec::fp4::Mxfp4Tensor m =
      mixprec::fp4::quantize_mxfp4(w, mixprec::fp4::MxScaleMode::kRceil);
  const at::Tensor w_mx = mixprec::fp4::dequantize_mxfp4(m, at::kFloat);
  // An element's error is at most one unit of its block's scale (half the step from 4 to 6):
  // NVFP4's unit is amax_b / 6 within E4M3's rounding (1/16) and bf16's; RCEIL's power of two is
  // below amax_b / 3.
  const double amax = w.abs().max().item<double>();
  EXPECT_LE((w_nv.to(torch::kFloat) - w).abs().max().item<double>(), amax / 6 * 1.08);
  EXPECT_LE((w_mx - w).abs().max().item<double>(), amax / 3);
  EXPECT_GT(at::cosine_similarity(w_nv.to(torch::kFloat).reshape({-1}), w.reshape({-1}), 0)
                .item<double>(),
            0.99);
}

}  // namespace
