// MXFP8 (quantize_mxfp8_ / dequantize_mxfp8_) against a reference written here: per block of 32
// along a row (the last one of a row shorter), amax, TE's E8M0 exponent rule, then each element
// cast by the independent search of fp8_reference.h; for every input dtype, compiled SIMD target
// and 1 to 3 threads, with partial, all-zero, tiny and inf/NaN blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/fp8_reference.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {
namespace {

namespace ref = fp8_reference;
using ref::bits_in;
using ref::for_each_backend;
using ref::ThreadCount;
using ref::Typed;

// TransformerEngine common/util/ptx.cuh, float_to_e8m0 (the path without sm_100's cvt.rp.ue8m0):
// the biased exponent of val rounded up to a power of two; 0 for 0; a subnormal val up to 2^-127
// stays at 0; 0xfe is the largest. TE maps NaN to 0xff and inf to 0xfe; mixprec gives a block
// holding inf or NaN the E8M0 NaN 0xff (OCP MX v1.0: the whole block is NaN), so those never
// reach this function here.
std::uint8_t te_float_to_e8m0(float val) {
  if (val == 0.0f) return 0x00;
  const std::uint32_t val_u32 = ref::bits32(val);
  auto exponent = static_cast<std::uint8_t>(val_u32 >> 23);
  const std::uint32_t mantissa = val_u32 & 0x7fffff;
  if ((mantissa > 0 && exponent != 0xfe) && !(exponent == 0 && mantissa <= 0x400000)) ++exponent;
  return exponent;
}

struct MxReference {
  std::vector<std::uint8_t> q, scales;
};

// The reference quantization of x as rows of `cols`. With NanAmax::kIgnore (TE's fmaxf block
// amax) a NaN element is left out of its block's amax and becomes the format's NaN with its sign.
MxReference reference_mx(const Typed& x, std::int64_t cols, Fp8Format f,
                         NanAmax nan = NanAmax::kPropagate) {
  const std::int64_t per_row = (cols + 31) / 32;
  const std::int64_t rows = x.numel() / cols;
  MxReference out{std::vector<std::uint8_t>(static_cast<std::size_t>(x.numel())),
                  std::vector<std::uint8_t>(static_cast<std::size_t>(rows * per_row))};
  const float max_norm_rcp = 1.0f / static_cast<float>(ref::decode(ref::max_code(f), f));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < per_row; ++b) {
      const std::int64_t begin = r * cols + b * 32, end = std::min(begin + 32, (r + 1) * cols);
      float amax = 0.0f;
      bool nonfinite = false;
      for (std::int64_t i = begin; i < end; ++i) {
        const float a = std::fabs(x.as_float(i));
        if (std::isnan(a) && nan == NanAmax::kIgnore) continue;
        nonfinite |= !std::isfinite(a);
        amax = std::max(amax, a);
      }
      const std::uint8_t e = nonfinite ? 0xff : te_float_to_e8m0(amax * max_norm_rcp);
      out.scales[static_cast<std::size_t>(r * per_row + b)] = e;
      // Each element times 2^(127 - e) in float, then the cast; a NaN block is all NaN (0x7f).
      const float inverse = std::ldexp(1.0f, 127 - e);
      for (std::int64_t i = begin; i < end; ++i) {
        out.q[static_cast<std::size_t>(i)] =
            e == 0xff ? 0x7f : ref::quantize(x.as_float(i) * inverse, f);
      }
    }
  }
  return out;
}

// Values of rows of `cols`, block by block of one kind: ordinary, all zero, tiny (float
// subnormals), huge, holding an inf or a NaN, spanning a wide range.
std::vector<double> mx_values(std::int64_t rows, std::int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const std::int64_t block = (i % cols) / 32 + (i / cols) * 7;
    double x = unit(rng);
    switch (block % 7) {
      case 0:
        x *= 3.0;
        break;
      case 1:
        x = (i % 3 == 0) ? -0.0 : 0.0;
        break;
      case 2:
        x *= 1e-39;
        break;
      case 3:
        x *= 3e38;
        break;
      case 4:
        x = std::ldexp(x, static_cast<int>(rng() % 60) - 30);
        break;
      case 5:
        if (rng() % 16 == 0)
          x = rng() % 2 ? -std::numeric_limits<double>::infinity() : std::nan("");
        break;
      default:
        x *= 448.0;
        break;
    }
    v[static_cast<std::size_t>(i)] = x;
  }
  return v;
}

TEST(Fp8MxTest, ExponentRuleIsTheSmallestPowerOfTwoThatAvoidsSaturation) {
  // The property behind TE's rule, checked on the reference and on mx_block_exponent().
  std::mt19937 rng(3);
  for (Fp8Format f : ref::kFormats) {
    const double max = ref::decode(ref::max_code(f), f);
    for (int k = 0; k < 100000; ++k) {
      const float amax = ref::from_bits32(static_cast<std::uint32_t>(rng()) & 0x7f7fffffu);
      const float value = amax * (1.0f / static_cast<float>(max));
      const std::uint8_t e = te_float_to_e8m0(value);
      ASSERT_EQ(mx_block_exponent(amax, f), e) << amax;
      if (value >= std::ldexp(1.0f, -126) && e < 0xfe) {
        EXPECT_GE(std::ldexp(1.0, e - 127), value) << amax;
        EXPECT_LT(std::ldexp(1.0, e - 128), value) << amax;
      }
    }
    EXPECT_EQ(mx_block_exponent(0.0f, f), 0);
    EXPECT_EQ(mx_block_exponent(std::numeric_limits<float>::infinity(), f), 0xff);
    EXPECT_EQ(mx_block_exponent(std::nanf(""), f), 0xff);
    EXPECT_EQ(mx_block_exponent(static_cast<float>(max), f), 127);  // amax = max: scale 1
  }
}

struct Shape {
  std::int64_t rows, cols;
};

constexpr Shape kShapes[] = {{1, 1},  {3, 5},   {2, 31},  {4, 32}, {3, 33}, {5, 64},
                             {2, 65}, {3, 100}, {1, 257}, {7, 96}, {0, 32}};
constexpr Shape kThreadedShape{700, 1100};  // 770K elements: > 1.5 MB even in 16 bits

TEST(Fp8MxTest, QuantizeMatchesTheReferenceOnEveryTargetDtypeShapeAndThreadCount) {
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back(kThreadedShape);
  for (const Shape& s : shapes) {
    const bool threaded = s.rows == kThreadedShape.rows;
    for (DType dtype : ref::kDTypes) {
      const Typed x = [&] {
        Typed t(dtype, s.rows * s.cols);
        const std::vector<double> v = mx_values(s.rows, s.cols, static_cast<unsigned>(s.cols));
        for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, v[static_cast<std::size_t>(i)]);
        return t;
      }();
      for (Fp8Format f : ref::kFormats) {
        for (NanAmax nan : {NanAmax::kPropagate, NanAmax::kIgnore}) {
          const MxReference want = reference_mx(x, s.cols, f, nan);
          for_each_backend([&](const std::string& backend) {
            for (int threads : threaded ? std::vector<int>{1, 2, 3} : std::vector<int>{1}) {
              const ThreadCount scoped(threads);
              const std::string what = backend + " " + dtype_name(dtype) + " " +
                                       fp8_format_name(f) + " " + std::to_string(s.rows) + "x" +
                                       std::to_string(s.cols) +
                                       " threads=" + std::to_string(threads) +
                                       (nan == NanAmax::kIgnore ? " kIgnore" : "");
              std::vector<std::uint8_t> q(want.q.size() + 8, 0x5a),
                  scales(want.scales.size() + 8, 0x5a);
              quantize_mxfp8_(x.view(), s.cols, q.data(), scales.data(), f, nullptr, nan);
              for (std::size_t b = 0; b < want.scales.size(); ++b) {
                if (scales[b] != want.scales[b]) {
                  ADD_FAILURE() << what << ": block " << b << " exponent " << int{scales[b]}
                                << ", want " << int{want.scales[b]};
                  break;
                }
              }
              for (std::size_t i = 0; i < want.q.size(); ++i) {
                if (q[i] != want.q[i]) {
                  ADD_FAILURE() << what << ": element " << i << " ("
                                << x.value(static_cast<std::int64_t>(i)) << ", block exponent "
                                << int{want.scales[i / static_cast<std::size_t>(s.cols) *
                                                       ((s.cols + 31) / 32) +
                                                   i % static_cast<std::size_t>(s.cols) / 32]}
                                << ") gave 0x" << std::hex << int{q[i]} << ", want 0x"
                                << int{want.q[i]};
                  break;
                }
              }
              for (std::size_t k = 0; k < 8; ++k) {
                EXPECT_EQ(q[want.q.size() + k], 0x5a) << what << ": wrote past q";
                EXPECT_EQ(scales[want.scales.size() + k], 0x5a) << what << ": wrote past scales";
              }
            }
          });
        }
      }
    }
  }
}

TEST(Fp8MxTest, SpecialBlocksGetTheirExponents) {
  // One row of four blocks: all zero, 1e-39 (tiny), inf inside, NaN inside; and a last short one.
  std::vector<double> v(4 * 32 + 3, 1.0);
  for (int i = 0; i < 32; ++i) v[static_cast<std::size_t>(i)] = i % 2 ? 0.0 : -0.0;
  for (int i = 32; i < 64; ++i) v[static_cast<std::size_t>(i)] = 1e-39;
  v[70] = -std::numeric_limits<double>::infinity();
  v[127] = std::nan("");
  v[128] = 448.0;
  Typed x(DType::kFloat32, static_cast<std::int64_t>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) x.set(static_cast<std::int64_t>(i), v[i]);
  std::vector<std::uint8_t> q(v.size()), scales(5);
  quantize_mxfp8_(x.view(), x.numel(), q.data(), scales.data(), Fp8Format::kE4M3);
  EXPECT_EQ(scales[0], 0);  // zero block: exponent 0, codes +-0
  EXPECT_EQ(q[0], 0x80);
  EXPECT_EQ(q[1], 0x00);
  EXPECT_EQ(scales[1], 0);  // 1e-39 / 448 is far below 2^-127
  EXPECT_EQ(scales[2], 0xff);
  EXPECT_EQ(scales[3], 0xff);
  for (int i = 64; i < 128; ++i) EXPECT_EQ(q[static_cast<std::size_t>(i)], 0x7f) << i;
  EXPECT_EQ(scales[4], 127);  // amax 448: scale 1
  EXPECT_EQ(q[128], 0x7e);
  // Dequantized: the NaN blocks are NaN, the others exact.
  Typed out(DType::kFloat32, x.numel());
  dequantize_mxfp8_(q.data(), scales.data(), x.numel(), Fp8Format::kE4M3, out.view());
  EXPECT_TRUE(std::isnan(out.value(64)) && std::isnan(out.value(127)));
  EXPECT_EQ(out.value(128), 448.0);
  EXPECT_EQ(out.value(129), 1.0);
  EXPECT_TRUE(std::signbit(out.value(0)));
  // TE's block amax skips the NaN (fmaxf): block 3 takes the exponent of its 1s, and only the NaN
  // element is NaN; the block with inf is still all NaN.
  quantize_mxfp8_(x.view(), x.numel(), q.data(), scales.data(), Fp8Format::kE4M3, nullptr,
                  NanAmax::kIgnore);
  EXPECT_EQ(scales[2], 0xff);
  EXPECT_EQ(scales[3], te_float_to_e8m0(1.0f / 448.0f));
  EXPECT_EQ(q[127], 0x7f);
  EXPECT_EQ(q[96], ref::quantize(std::ldexp(1.0f, 127 - scales[3]), Fp8Format::kE4M3));
  dequantize_mxfp8_(q.data(), scales.data(), x.numel(), Fp8Format::kE4M3, out.view());
  EXPECT_TRUE(std::isnan(out.value(127)));
  EXPECT_EQ(out.value(96), 1.0);
  // A block of NaNs only: amax 0 (TE: fmaxf(0, NaN) is 0), exponent 0, every element NaN.
  std::vector<double> nans(32, std::nan(""));
  Typed all_nan(DType::kFloat32, 32);
  for (std::int64_t i = 0; i < 32; ++i) all_nan.set(i, nans[static_cast<std::size_t>(i)]);
  quantize_mxfp8_(all_nan.view(), 32, q.data(), scales.data(), Fp8Format::kE4M3, nullptr,
                  NanAmax::kIgnore);
  EXPECT_EQ(scales[0], 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[static_cast<std::size_t>(i)] & 0x7f, 0x7f) << i;
}

TEST(Fp8MxTest, DequantizeIsTheCodeTimesTheBlockScale) {
  std::mt19937 rng(11);
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back(kThreadedShape);
  for (const Shape& s : shapes) {
    const bool threaded = s.rows == kThreadedShape.rows;
    const std::int64_t n = s.rows * s.cols, per_row = (s.cols + 31) / 32;
    std::vector<std::uint8_t> q(static_cast<std::size_t>(n)),
        scales(static_cast<std::size_t>(s.rows * per_row));
    for (auto& c : q) c = static_cast<std::uint8_t>(rng());
    // Exponents across the whole range, 0 (2^-127) and 0xff (NaN) included.
    for (std::size_t b = 0; b < scales.size(); ++b) {
      scales[b] = b % 5 == 0 ? static_cast<std::uint8_t>(b % 10 == 0 ? 0 : 0xff)
                             : static_cast<std::uint8_t>(rng());
    }
    for (DType dtype : ref::kDTypes) {
      for (Fp8Format f : ref::kFormats) {
        std::vector<std::uint64_t> want(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) {
          const std::uint8_t e =
              scales[static_cast<std::size_t>(i / s.cols * per_row + i % s.cols / 32)];
          const float value =
              e == 0xff ? std::numeric_limits<float>::quiet_NaN()
                        : static_cast<float>(ref::decode(q[static_cast<std::size_t>(i)], f)) *
                              std::ldexp(1.0f, e - 127);
          want[static_cast<std::size_t>(i)] = bits_in(dtype, value);
        }
        for_each_backend([&](const std::string& backend) {
          for (int threads : threaded ? std::vector<int>{1, 2, 3} : std::vector<int>{1}) {
            const ThreadCount scoped(threads);
            Typed out(dtype, n);
            dequantize_mxfp8_(q.data(), scales.data(), s.cols, f, out.view());
            for (std::int64_t i = 0; i < n; ++i) {
              if (out.bits(i) != want[static_cast<std::size_t>(i)]) {
                ADD_FAILURE() << backend << " " << dtype_name(dtype) << " " << fp8_format_name(f)
                              << " " << s.rows << "x" << s.cols << " threads " << threads
                              << ": element " << i << " code 0x" << std::hex
                              << int{q[static_cast<std::size_t>(i)]} << " gave " << out.value(i);
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

TEST(Fp8MxTest, RoundTripKeepsEveryElementWithinHalfAStepOfItsBlock) {
  // quantize then dequantize: each element within half a code step (at the block's scale) of x.
  const std::int64_t rows = 9, cols = 77;
  std::vector<double> v = mx_values(rows, cols, 5);
  Typed x(DType::kFloat32, rows * cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) x.set(i, v[static_cast<std::size_t>(i)]);
  for (Fp8Format f : ref::kFormats) {
    std::vector<std::uint8_t> q(static_cast<std::size_t>(rows * cols)),
        scales(static_cast<std::size_t>(rows * 3));
    quantize_mxfp8_(x.view(), cols, q.data(), scales.data(), f);
    Typed back(DType::kFloat32, rows * cols);
    dequantize_mxfp8_(q.data(), scales.data(), cols, f, back.view());
    const int mantissa_bits = f == Fp8Format::kE4M3 ? 3 : 2;
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      const std::uint8_t e = scales[static_cast<std::size_t>(i / cols * 3 + i % cols / 32)];
      if (e == 0xff) {
        EXPECT_TRUE(std::isnan(back.value(i)));
        continue;
      }
      const double a = std::fabs(x.value(i));
      // Step of the element's binade, no smaller than the subnormal step, at the block scale.
      const double scale = std::ldexp(1.0, e - 127);
      const double min_normal = std::ldexp(1.0, f == Fp8Format::kE4M3 ? -6 : -14);
      const double binade =
          std::max(min_normal, std::ldexp(1.0, std::ilogb(std::max(a / scale, 1e-300))));
      const double step = std::ldexp(binade, -mantissa_bits) * scale;
      EXPECT_LE(std::fabs(back.value(i) - x.value(i)), step / 2 + 1e-45)
          << fp8_format_name(f) << " " << i;
    }
  }
}

}  // namespace
}  // namespace mixprec::core
