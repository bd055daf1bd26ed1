// The CUDA FP4 kernels' per-thread code (src/cuda/fp4_elements.cuh) run on the host, every
// emulated thread of a grid in turn (the kernels' grid-stride loops, the 2D kernel's half-warp
// tiles with its shuffle reduction), against mixprec's CPU kernels (core::*_ on CPU views) bit for
// bit: NVFP4 1D and 2D, nearest and stochastic, with the tensor's amax and with others (0, inf,
// NaN, too small); NVFP4 and MXFP4 dequantize of real and random codes and scales into every dtype;
// MXFP4 FLOOR and RCEIL; the RHT. Inputs of every dtype with zero, -0, subnormal, huge, NaN (quiet,
// signalling, negative) and +-inf blocks. No GPU needed; cuda_fp4_test.cpp runs the kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "cuda/fp4_elements.cuh"
#include "cuda/fp4_test_util.h"
#include "mixprec/core/fp4.h"
#include "mixprec/core/fp8.h"

namespace mixprec::core::cuda {
namespace {

using fp4_test::as_bytes;
using fp4_test::first_difference;
using fp4_test::kDtypes;
using fp4_test::make_input;
using fp4_test::random_bytes;
using fp4_test::Typed;

// Calls f(DType-tag) with the dtype as a compile-time constant, as fp4.cu's launchers.
template <typename F>
void with_type(DType dtype, const F& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(std::integral_constant<DType, DType::kFloat32>{});
    case DType::kFloat64:
      return f(std::integral_constant<DType, DType::kFloat64>{});
    case DType::kFloat16:
      return f(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kBFloat16:
      return f(std::integral_constant<DType, DType::kBFloat16>{});
  }
}

// The thread count of fp4.cu's launches for `units` blocks: blocks_for(units) blocks of 256.
std::int64_t launch_threads(std::int64_t units) {
  const std::int64_t b = (units + 255) / 256;
  return 256 * (b < 1 ? 1 : b > 1024 ? 1024 : b);
}

// quantize_nvfp4_kernel / quantize_nvfp4_2d_kernel with `threads` threads (2D: a multiple of 32,
// as every grid is), thread by thread; the 2D kernel's half-warps lane by lane, with the shuffle
// butterfly of the tile amax.
template <DType kType>
void emulate_quantize_nvfp4(const void* data, std::int64_t n, std::int64_t cols, float amax,
                            std::uint8_t* q, std::uint8_t* block_scales,
                            const Nvfp4Options& options, std::int64_t threads) {
  const auto* x = static_cast<const Fp4Storage<kType>*>(data);
  const Nvfp4TensorScales scales = nvfp4_tensor_scales(amax);
  const std::int64_t blocks = n / 16;
  if (!options.two_d) {
    for (std::int64_t t = 0; t < threads; ++t) {
      for (std::int64_t b = t; b < blocks; b += threads) {
        nvfp4_quantize_block<kType>(x, b, scales, options, q, block_scales);
      }
    }
    return;
  }
  for (std::int64_t half = 0; half < threads / 16; ++half) {
    for (std::int64_t base = 16 * half; base < blocks; base += threads) {
      float v[16][16], a[16];
      std::int64_t b[16];
      for (int lane = 0; lane < 16; ++lane) {
        b[lane] = nvfp4_tile_block(base + lane, cols / 16);
        fp4_load<kType, 16>(x, b[lane] * 16, v[lane]);
        a[lane] = amax_skip_nan(v[lane], 16);
      }
      for (int offset = 8; offset > 0; offset /= 2) {  // __shfl_xor_sync, width 16
        float next[16];
        for (int lane = 0; lane < 16; ++lane)
          next[lane] = nvfp4_tile_max(a[lane], a[lane ^ offset]);
        std::memcpy(a, next, sizeof(a));
      }
      for (int lane = 0; lane < 16; ++lane) {
        nvfp4_quantize_tile_row(v[lane], b[lane], a[lane], scales, options, q, block_scales);
      }
    }
  }
}

// NVFP4 quantize of x by the emulated threads and by the CPU kernel: the same codes and scales,
// whatever the buffers held before (two sentinels: an element left unwritten shows in one).
void check_nvfp4_quantize(Typed& x, std::int64_t cols, float amax, const Nvfp4Options& options,
                          std::vector<std::uint8_t>* q_out = nullptr) {
  const auto n = static_cast<std::size_t>(x.n);
  std::vector<std::uint8_t> q_cpu(n / 2), s_cpu(n / 16);
  quantize_nvfp4_(x.view(), cols, &amax, q_cpu.data(), s_cpu.data(), options);
  const std::int64_t blocks = x.n / 16;
  for (std::int64_t threads : {std::int64_t{32}, std::int64_t{96}, launch_threads(blocks)}) {
    for (std::uint8_t sentinel : {0x00, 0xff}) {
      std::vector<std::uint8_t> q(n / 2, sentinel), s(n / 16, sentinel);
      with_type(x.dtype, [&](auto type) {
        emulate_quantize_nvfp4<decltype(type)::value>(x.data(), x.n, cols, amax, q.data(), s.data(),
                                                      options, threads);
      });
      ASSERT_EQ(first_difference(s, s_cpu), -1) << "scales, threads " << threads;
      ASSERT_EQ(first_difference(q, q_cpu), -1) << "codes, threads " << threads;
    }
  }
  if (q_out != nullptr) *q_out = q_cpu;
}

TEST(CudaFp4ElementTest, Nvfp4QuantizeGivesTheCpuBitsFor1dAnd2dNearestAndStochastic) {
  std::mt19937_64 rng(101);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::int64_t shapes[][2] = {{16, 16}, {32, 48}, {48, 160}, {64, 256}};
  for (DType dtype : kDtypes) {
    for (const auto& shape : shapes) {
      for (bool inf : {false, true}) {
        Typed x = make_input(dtype, shape[0] * shape[1], 16, inf, rng);
        float amax = 0.0f;
        amax_(x.view(), &amax, nullptr, NanAmax::kIgnore);
        for (bool two_d : {false, true}) {
          for (int rounding = 0; rounding < 3; ++rounding) {
            Nvfp4Options options;
            options.two_d = two_d;
            options.stochastic = rounding > 0;
            options.seed = rounding == 2 ? 0x123456789abcdefull : 7;
            options.offset = rounding == 2 ? (1ull << 40) + 3 : 0;
            // The tensor's amax, and others: blocks then saturate, or S_enc is 1 or FLT_MAX.
            for (float a : {amax, amax * 0.37f, 0.0f, HUGE_VALF, nan, 3e38f, 1e-30f}) {
              SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << shape[0] << "x"
                                                << shape[1] << " inf=" << inf << " two_d=" << two_d
                                                << " rounding=" << rounding << " amax=" << a);
              check_nvfp4_quantize(x, shape[1], a, options);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Stochastic rounding is on (it changes codes) and follows seed and offset.
TEST(CudaFp4ElementTest, StochasticCodesDependOnSeedAndOffsetAndMatchTheCpu) {
  std::mt19937_64 rng(103);
  Typed x = make_input(DType::kFloat32, 64 * 256, 16, false, rng);
  float amax = 0.0f;
  amax_(x.view(), &amax, nullptr, NanAmax::kIgnore);
  std::vector<std::uint8_t> nearest, a, b, c;
  Nvfp4Options options;
  check_nvfp4_quantize(x, 256, amax, options, &nearest);
  options.stochastic = true;
  options.seed = 42;
  check_nvfp4_quantize(x, 256, amax, options, &a);
  options.offset = 1;
  check_nvfp4_quantize(x, 256, amax, options, &b);
  options.seed = 43;
  options.offset = 0;
  check_nvfp4_quantize(x, 256, amax, options, &c);
  EXPECT_NE(a, nearest);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

// dequantize_nvfp4_kernel's threads against the CPU into `out_dtype`.
void check_nvfp4_dequantize(const std::vector<std::uint8_t>& q, const std::vector<std::uint8_t>& s,
                            float amax, std::int64_t cols, DType out_dtype) {
  const std::int64_t n = static_cast<std::int64_t>(q.size()) * 2;
  Typed cpu(out_dtype, n), emulated(out_dtype, n);
  dequantize_nvfp4_(q.data(), s.data(), &amax, cols, cpu.view());
  const std::int64_t blocks = n / 16;
  for (std::int64_t threads : {std::int64_t{7}, launch_threads(blocks)}) {
    std::fill(emulated.bytes.begin(), emulated.bytes.end(), 0xaa);
    with_type(out_dtype, [&](auto type) {
      constexpr DType kType = decltype(type)::value;
      auto* out = static_cast<Fp4Storage<kType>*>(emulated.data());
      for (std::int64_t t = 0; t < threads; ++t) {
        for (std::int64_t b = t; b < blocks; b += threads) {
          nvfp4_dequantize_block<kType>(q.data(), s.data(), amax, b, out);
        }
      }
    });
    ASSERT_EQ(first_difference(emulated.bytes, cpu.bytes), -1)
        << dtype_name(out_dtype) << " amax " << amax << " threads " << threads;
  }
}

TEST(CudaFp4ElementTest, Nvfp4DequantizeGivesTheCpuBitsNanIncluded) {
  std::mt19937_64 rng(107);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType in : kDtypes) {
    for (bool inf : {false, true}) {
      Typed x = make_input(in, 48 * 160, 16, inf, rng);
      float amax = 0.0f;
      amax_(x.view(), &amax, nullptr, NanAmax::kIgnore);
      const auto n = static_cast<std::size_t>(x.n);
      std::vector<std::uint8_t> q(n / 2), s(n / 16);
      quantize_nvfp4_(x.view(), 160, &amax, q.data(), s.data());
      // Random codes and scales too: E4M3 NaN scales (0x7f, 0xff), zero and subnormal ones.
      const std::vector<std::uint8_t> q_random = random_bytes(n / 2, rng);
      const std::vector<std::uint8_t> s_random = random_bytes(n / 16, rng);
      for (DType out : kDtypes) {
        for (float a : {amax, 0.0f, HUGE_VALF, nan, -nan, 3e38f, 1e-40f}) {
          check_nvfp4_dequantize(q, s, a, 160, out);
          check_nvfp4_dequantize(q_random, s_random, a, 160, out);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(CudaFp4ElementTest, MxQuantizeAndDequantizeGiveTheCpuBitsInBothModes) {
  std::mt19937_64 rng(109);
  const std::int64_t shapes[][2] = {{1, 32}, {3, 96}, {7, 160}, {64, 256}};
  for (DType dtype : kDtypes) {
    for (const auto& shape : shapes) {
      for (MxScaleMode mode : {MxScaleMode::kFloor, MxScaleMode::kRceil}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << shape[0] << "x" << shape[1]
                                          << " mode " << static_cast<int>(mode));
        Typed x = make_input(dtype, shape[0] * shape[1], 32, true, rng);
        const auto n = static_cast<std::size_t>(x.n);
        const std::int64_t blocks = x.n / 32;
        std::vector<std::uint8_t> q_cpu(n / 2), s_cpu(n / 32);
        quantize_mxfp4_(x.view(), shape[1], q_cpu.data(), s_cpu.data(), mode);
        for (std::int64_t threads : {std::int64_t{5}, launch_threads(blocks)}) {
          for (std::uint8_t sentinel : {0x00, 0xff}) {
            std::vector<std::uint8_t> q(n / 2, sentinel), s(n / 32, sentinel);
            with_type(dtype, [&](auto type) {
              constexpr DType kType = decltype(type)::value;
              const auto* data = static_cast<const Fp4Storage<kType>*>(x.data());
              for (std::int64_t t = 0; t < threads; ++t) {
                for (std::int64_t b = t; b < blocks; b += threads) {
                  mxfp4_quantize_block<kType>(data, b, mode, q.data(), s.data());
                }
              }
            });
            ASSERT_EQ(first_difference(s, s_cpu), -1) << "scales, threads " << threads;
            ASSERT_EQ(first_difference(q, q_cpu), -1) << "codes, threads " << threads;
          }
        }
        // Dequantize the CPU's codes, and random codes under random exponents (0, 254, 255 among
        // them), into every dtype.
        std::vector<std::uint8_t> s_random = random_bytes(n / 32, rng);
        s_random[0] = 0xff;
        if (s_random.size() > 2) s_random[1] = 0, s_random[2] = 0xfe;
        const std::vector<std::uint8_t> q_random = random_bytes(n / 2, rng);
        for (DType out_dtype : kDtypes) {
          for (int k = 0; k < 2; ++k) {
            const std::vector<std::uint8_t>& q = k == 0 ? q_cpu : q_random;
            const std::vector<std::uint8_t>& s = k == 0 ? s_cpu : s_random;
            Typed cpu(out_dtype, x.n), emulated(out_dtype, x.n);
            dequantize_mxfp4_(q.data(), s.data(), shape[1], cpu.view());
            std::fill(emulated.bytes.begin(), emulated.bytes.end(), 0xaa);
            with_type(out_dtype, [&](auto type) {
              constexpr DType kType = decltype(type)::value;
              auto* out = static_cast<Fp4Storage<kType>*>(emulated.data());
              for (std::int64_t t = 0; t < 3; ++t) {
                for (std::int64_t b = t; b < blocks; b += 3) {
                  mxfp4_dequantize_block<kType>(q.data(), s.data(), b, out);
                }
              }
            });
            ASSERT_EQ(first_difference(emulated.bytes, cpu.bytes), -1)
                << "into " << dtype_name(out_dtype) << (k == 0 ? " (codes)" : " (random)");
          }
        }
      }
    }
  }
}

TEST(CudaFp4ElementTest, HadamardGivesTheCpuBitsNanAndInfIncluded) {
  std::mt19937_64 rng(113);
  for (DType dtype : kDtypes) {
    for (bool inf : {false, true}) {
      Typed x = make_input(dtype, 37 * 16 * 4, 16, inf, rng);
      const std::int64_t runs = x.n / 16;
      std::vector<std::uint16_t> cpu(static_cast<std::size_t>(x.n));
      hadamard16_(x.view(), cpu.data());
      std::vector<std::uint16_t> emulated(cpu.size(), 0xaaaa);
      with_type(dtype, [&](auto type) {
        constexpr DType kType = decltype(type)::value;
        const auto* data = static_cast<const Fp4Storage<kType>*>(x.data());
        for (std::int64_t t = 0; t < 9; ++t) {
          for (std::int64_t g = t; g < runs; g += 9)
            hadamard16_run<kType>(data, g, emulated.data());
        }
      });
      ASSERT_EQ(first_difference(as_bytes(emulated), as_bytes(cpu)), -1)
          << dtype_name(dtype) << " inf=" << inf;
    }
  }
}

// Note [NaN bits of the FP4 kernels] (core/fp4_ops.h): every NaN a dequantize or the RHT makes is
// 0x7fc00000 (bfloat16 0x7fc0), whatever made it, so a device (which makes 0x7fffffff) and every
// CPU give the same bits; into float64 it is 0x7ff8000000000000, as a CPU widens it.
TEST(CudaFp4ElementTest, EveryNanMadeIsTheOneQuietNan) {
  const std::uint8_t q[16] = {0x00, 0x80, 0x08, 0x17, 0x70, 0xff, 0x42, 0x24,
                              0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77};
  const std::uint8_t mx_nan[1] = {0xff};
  float out[32];
  mxfp4_dequantize_block<DType::kFloat32>(q, mx_nan, 0, out);
  for (float v : out) EXPECT_EQ(float_to_bits(v), 0x7fc00000u);
  double wide[32];
  mxfp4_dequantize_block<DType::kFloat64>(q, mx_nan, 0, wide);
  for (double v : wide) {
    std::uint64_t b;
    std::memcpy(&b, &v, 8);
    EXPECT_EQ(b, 0x7ff8000000000000u);
  }
  // amax inf: a zero scale makes inf * 0 (x86: 0xffc00000), a nonzero one inf, times a zero code
  // NaN again; an amax NaN (kPropagate's) propagates with its payload on a CPU.
  const std::uint8_t scales[2] = {0x00, 0x38};
  for (float amax : {HUGE_VALF, std::numeric_limits<float>::quiet_NaN(),
                     std::numeric_limits<float>::signaling_NaN()}) {
    for (std::int64_t b = 0; b < 2; ++b) {
      nvfp4_dequantize_block<DType::kFloat32>(q, scales, amax, b, out);
      for (int i = 0; i < 16; ++i) {
        const bool zero_code = ((q[b * 8 + i / 2] >> (4 * (i % 2))) & 0x7) == 0;
        if (std::isnan(out[i]) || b == 0 || zero_code || amax != HUGE_VALF) {
          EXPECT_EQ(float_to_bits(out[i]), 0x7fc00000u) << "block " << b << " element " << i;
        }
      }
    }
  }
  // The RHT: inf - inf in the first stage reaches the even outputs (the odd ones are inf); a
  // negative signalling NaN reaches every output.
  std::uint16_t h[16];
  const float with_infs[16] = {HUGE_VALF, -HUGE_VALF, 1.0f};
  core::hadamard16(with_infs, h);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(h[i], i % 2 == 0 ? 0x7fc0u : 0x7f80u) << i;
  float with_nan[16] = {0.0f, 2.0f, -3.0f};
  with_nan[0] = bits_to_float(0xff800001u);
  core::hadamard16(with_nan, h);
  for (std::uint16_t v : h) EXPECT_EQ(v, 0x7fc0u);
}

// Each 2D thread's block: the 16 units of a half-warp are one tile's 16 rows, and every block of
// the tensor is some unit's, once.
TEST(CudaFp4ElementTest, TileUnitsCoverEveryBlockOnceAHalfWarpATile) {
  for (std::int64_t blocks_per_row : {1, 2, 3, 10, 256}) {
    const std::int64_t rows = 48, blocks = rows * blocks_per_row;
    std::vector<int> seen(static_cast<std::size_t>(blocks), 0);
    for (std::int64_t unit = 0; unit < blocks; ++unit) {
      const std::int64_t b = nvfp4_tile_block(unit, blocks_per_row);
      ASSERT_GE(b, 0);
      ASSERT_LT(b, blocks);
      ++seen[static_cast<std::size_t>(b)];
      const std::int64_t first = nvfp4_tile_block(unit / 16 * 16, blocks_per_row);
      EXPECT_EQ(b % blocks_per_row, first % blocks_per_row);              // the same tile column
      EXPECT_EQ(b / blocks_per_row, first / blocks_per_row + unit % 16);  // row unit % 16 of it
    }
    for (int s : seen) ASSERT_EQ(s, 1) << blocks_per_row;
  }
}

}  // namespace
}  // namespace mixprec::core::cuda
