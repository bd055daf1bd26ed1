// The per-thread code of the CUDA FP8 kernels (src/cuda/fp8_elements.cuh) run on the host, every
// emulated thread of a grid in turn, against references written here from the format definitions
// (the FP8 values of each code in double, nearest-even by search, TE's delayed rule): quantize with
// its fused amax, dequantize, MXFP8 blocks (rows whose last block is short, zero, subnormal, inf
// and NaN blocks), the delayed update's batches, and the NaN bits a CPU would give. No GPU needed;
// tests/gpu/fp8_cuda_test.cpp checks the kernels themselves on a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8_ops.h"
#include "core/reference.h"
#include "cuda/fp8_elements.cuh"
#include "cuda/fp8_test_util.h"
#include "mixprec/core/fp8.h"

namespace mixprec::core::cuda {
namespace {

// ---- Quantize, dequantize -------------------------------------------------------------------

template <DType kType, Fp8Format kFormat>
void check_quantize(std::mt19937_64& rng) {
  for (std::int64_t n : {1, 5, 1000, 4099}) {
    Tensor x = random_tensor(kType, n, rng, /*specials=*/true);
    bool any_nan = false;
    double ref_amax = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = x.value(i);
      any_nan = any_nan || std::isnan(v);
      if (!std::isnan(v)) ref_amax = std::max(ref_amax, std::fabs(static_cast<double>(v)));
    }
    for (float scale : {1.0f, 0.37f, 1024.0f, 0.0009765625f, 3.0e5f}) {
      for (int threads : {1, 7, 300}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(kType) << " " << fp8_format_name(kFormat) << " n=" << n
                     << " scale=" << scale << " threads=" << threads);
        for (std::uint8_t sentinel : {0x00, 0xff}) {  // an element left unwritten shows in one
          std::vector<std::uint8_t> q(static_cast<std::size_t>(n), sentinel);
          const std::uint32_t amax =
              run_quantize<kType, kFormat, true>(x, q.data(), scale, threads);
          if (any_nan) {  // recorded as the quiet NaN
            EXPECT_TRUE(std::isnan(from_bits32(amax)));
            EXPECT_EQ(canonical_amax_bits(amax), 0x7fc00000u);
          } else {
            EXPECT_EQ(canonical_amax_bits(amax), amax);
            EXPECT_EQ(amax, bits32(static_cast<float>(ref_amax)));
          }
          for (std::int64_t i = 0; i < n; ++i) {
            const std::uint8_t want = ref_quantize(ref_mul(x.value(i), scale), kFormat);
            ASSERT_EQ(q[static_cast<std::size_t>(i)], want)
                << "element " << i << " x bits 0x" << std::hex << x.bits(i);
          }
          std::vector<std::uint8_t> q2(static_cast<std::size_t>(n), sentinel);
          EXPECT_EQ((run_quantize<kType, kFormat, false>(x, q2.data(), scale, threads)), 0u);
          ASSERT_EQ(q2, q);
        }
        {  // NaNs skipped (NanAmax::kIgnore): the max over the other elements, the same codes.
          std::vector<std::uint8_t> q3(static_cast<std::size_t>(n));
          EXPECT_EQ((run_quantize<kType, kFormat, true>(x, q3.data(), scale, threads, true)),
                    bits32(static_cast<float>(ref_amax)));
          std::uint32_t skipped = 0;
          const auto* data = static_cast<const typename Fp8Io<kType>::Storage*>(x.data());
          for (int t = 0; t < threads; ++t) {
            skipped = max_bits(skipped, amax_share<kType>(data, n, t, threads, true));
          }
          EXPECT_EQ(skipped, bits32(static_cast<float>(ref_amax)));
        }
        // amax_kernel's shares give the fused amax.
        std::uint32_t amax = 0;
        const auto* data = static_cast<const typename Fp8Io<kType>::Storage*>(x.data());
        for (int t = 0; t < threads; ++t) {
          amax = max_bits(amax, amax_share<kType>(data, n, t, threads));
        }
        std::vector<std::uint8_t> q(static_cast<std::size_t>(n));
        EXPECT_EQ(amax, (run_quantize<kType, kFormat, true>(x, q.data(), scale, threads)));
      }
    }
  }
}

TEST(Fp8ElementTest, QuantizeAndAmaxMatchTheNearestEvenReferenceForEveryDtypeAndFormat) {
  std::mt19937_64 rng(5);
  check_quantize<DType::kFloat32, Fp8Format::kE4M3>(rng);
  check_quantize<DType::kFloat32, Fp8Format::kE5M2>(rng);
  check_quantize<DType::kFloat64, Fp8Format::kE4M3>(rng);
  check_quantize<DType::kFloat64, Fp8Format::kE5M2>(rng);
  check_quantize<DType::kFloat16, Fp8Format::kE4M3>(rng);
  check_quantize<DType::kFloat16, Fp8Format::kE5M2>(rng);
  check_quantize<DType::kBFloat16, Fp8Format::kE4M3>(rng);
  check_quantize<DType::kBFloat16, Fp8Format::kE5M2>(rng);
}

// One float through quantize_share (the kernel's code path) with scale 1.
std::uint8_t quantize_one(float v, Fp8Format format) {
  std::uint8_t q = 0;
  if (format == Fp8Format::kE4M3) {
    quantize_share<DType::kFloat32, Fp8Format::kE4M3, false>(&v, &q, 1, 1.0f, 0, 1);
  } else {
    quantize_share<DType::kFloat32, Fp8Format::kE5M2, false>(&v, &q, 1, 1.0f, 0, 1);
  }
  return q;
}

// Every midpoint between two adjacent codes goes to the even one; past the largest finite value
// (and +-inf) saturates; NaN keeps its sign; -0 stays -0.
TEST(Fp8ElementTest, MidpointsRoundToEvenAndOverflowSaturates) {
  for (Fp8Format format : kFormats) {
    SCOPED_TRACE(fp8_format_name(format));
    const std::uint8_t max_code = format == Fp8Format::kE4M3 ? 0x7e : 0x7b;
    for (int c = 0; c < max_code; ++c) {
      const double lo = ref_fp8_value(static_cast<std::uint8_t>(c), format);
      const double hi = ref_fp8_value(static_cast<std::uint8_t>(c + 1), format);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: a few bits
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      const std::uint8_t even = static_cast<std::uint8_t>(c % 2 == 0 ? c : c + 1);
      EXPECT_EQ(quantize_one(mid, format), even) << "midpoint " << mid;
      EXPECT_EQ(quantize_one(-mid, format), 0x80 | even);
      EXPECT_EQ(quantize_one(std::nextafter(mid, 0.0f), format), c);
      EXPECT_EQ(quantize_one(std::nextafter(mid, 1e9f), format), c + 1);
    }
    const float max = static_cast<float>(ref_fp8_value(max_code, format));
    EXPECT_EQ(max, fp8_max(format));
    for (float big : {max, std::nextafter(max, 1e30f), max * 1.07f, 1e30f, HUGE_VALF}) {
      EXPECT_EQ(quantize_one(big, format), max_code) << big;
      EXPECT_EQ(quantize_one(-big, format), 0x80 | max_code) << big;
    }
    EXPECT_EQ(quantize_one(std::numeric_limits<float>::quiet_NaN(), format), 0x7f);
    EXPECT_EQ(quantize_one(-std::numeric_limits<float>::quiet_NaN(), format), 0xff);
    EXPECT_EQ(quantize_one(-0.0f, format), 0x80);
    EXPECT_EQ(quantize_one(-1e-30f, format), 0x80);
  }
}

template <DType kType, Fp8Format kFormat>
void check_dequantize() {
  using Storage = typename Fp8Io<kType>::Storage;
  std::vector<std::uint8_t> q(256);
  for (int c = 0; c < 256; ++c) q[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(c);
  for (float scale_inv : {1.0f, 1.0f / 448.0f, 3.0e-3f, 7.5e4f, 1e-30f}) {
    std::vector<Storage> out(256);
    for (int t = 0; t < 3; ++t)
      dequantize_share<kType, kFormat>(q.data(), scale_inv, out.data(), 256, t, 3);
    for (int c = 0; c < 256; ++c) {
      SCOPED_TRACE(::testing::Message() << dtype_name(kType) << " " << fp8_format_name(kFormat)
                                        << " code " << c << " scale_inv " << scale_inv);
      const double value = ref_fp8_value(static_cast<std::uint8_t>(c), kFormat);
      std::uint64_t got = 0;
      std::memcpy(&got, &out[static_cast<std::size_t>(c)], sizeof(Storage));
      if (std::isnan(value)) {  // the code's NaN, its sign kept
        const int sign_shift = static_cast<int>(sizeof(Storage) * 8 - 1);
        EXPECT_EQ(got >> sign_shift, static_cast<std::uint64_t>(c >> 7));
        EXPECT_TRUE(testing::reference_isnan(kType, got));
        continue;
      }
      const float f = ref_mul(static_cast<float>(value), scale_inv);
      std::uint64_t want = 0;
      switch (kType) {
        case DType::kFloat32:
          want = bits32(f);
          break;
        case DType::kFloat64:
          want = bits64(static_cast<double>(f));
          break;
        case DType::kFloat16:
          want = testing::float_to_half_ref(f);
          break;
        case DType::kBFloat16:
          want = testing::float_to_bf16_ref(f);
          break;
      }
      EXPECT_EQ(got, want);
    }
  }
}

TEST(Fp8ElementTest, DequantizeOfEveryCodeMatchesTheReference) {
  check_dequantize<DType::kFloat32, Fp8Format::kE4M3>();
  check_dequantize<DType::kFloat32, Fp8Format::kE5M2>();
  check_dequantize<DType::kFloat64, Fp8Format::kE4M3>();
  check_dequantize<DType::kFloat64, Fp8Format::kE5M2>();
  check_dequantize<DType::kFloat16, Fp8Format::kE4M3>();
  check_dequantize<DType::kFloat16, Fp8Format::kE5M2>();
  check_dequantize<DType::kBFloat16, Fp8Format::kE4M3>();
  check_dequantize<DType::kBFloat16, Fp8Format::kE5M2>();
}

// ---- MXFP8 ----------------------------------------------------------------------------------

// TE's E8M0 choice written from its description: value = amax * float(1 / fp8_max) in float,
// rounded up to a power of two 2^(e - 127), e in [0, 254]; 0 for 0; 0xff for inf or NaN.
std::uint8_t ref_mx_exponent(float amax, Fp8Format format) {
  if (!std::isfinite(amax)) return 0xff;
  const float value = ref_mul(amax, static_cast<float>(1.0 / fp8_max(format)));
  if (value == 0.0f) return 0;
  int e = static_cast<int>(std::ceil(std::log2(static_cast<double>(value))));
  if (std::ldexp(1.0, e) < value) ++e;  // log2 of a non-power rounded onto an integer
  if (std::ldexp(1.0, e - 1) >= value) --e;
  return static_cast<std::uint8_t>(std::min(254, std::max(0, e + 127)));
}

// skip_nan: NanAmax::kIgnore (TE's fmaxf block amax), else kPropagate.
template <DType kType, Fp8Format kFormat>
void check_mx(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng, bool skip_nan) {
  using Storage = typename Fp8Io<kType>::Storage;
  SCOPED_TRACE(::testing::Message() << dtype_name(kType) << " " << fp8_format_name(kFormat) << " "
                                    << rows << "x" << cols << " skip_nan=" << skip_nan);
  const std::int64_t n = rows * cols, per_row = (cols + 31) / 32, blocks = rows * per_row;
  Tensor x = random_tensor(kType, n, rng, /*specials=*/false);
  // Special blocks (where the tensor has that many): all zero, subnormal floats, near FLT_MAX,
  // one inf, one -NaN (its element keeps the sign, the others become +NaN).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t k = 0; k < 5 && k < blocks; ++k) {
    const MxBlockSpan span = mx_block_span(k * 2 % blocks, cols);
    for (int l = 0; l < span.size; ++l) {
      const float third = static_cast<float>(l % 3 + 1) / 3.0f;
      const float v = k == 0   ? 0.0f
                      : k == 1 ? 1e-39f * third
                      : k == 2 ? 3e37f * third
                      : k == 3 ? (l == 0 ? HUGE_VALF : 1.0f)
                               : (l == 0 ? -nan : 1.0f);
      std::uint64_t bits = 0;
      switch (kType) {
        case DType::kFloat32:
          bits = bits32(v);
          break;
        case DType::kFloat64:
          bits = bits64(v);
          break;
        case DType::kFloat16:
          bits = std::isnan(v) ? 0xfe00 : testing::float_to_half_ref(v);
          break;
        case DType::kBFloat16:
          bits = std::isnan(v) ? 0xffc0 : testing::float_to_bf16_ref(v);
          break;
      }
      std::memcpy(x.bytes.data() + (span.begin + l) * element_size(kType), &bits,
                  element_size(kType));
    }
  }
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n), 0xaa), scales(blocks, 0xaa);
  run_mx<kType, kFormat>(x, cols, q.data(), scales.data(), /*warps=*/5, skip_nan);
  // Reference: per row, blocks of 32 columns.
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c0 = 0; c0 < cols; c0 += 32) {
      const std::int64_t end = std::min(cols, c0 + 32);
      float amax = 0.0f;
      bool has_nan = false;
      for (std::int64_t c = c0; c < end; ++c) {
        const float v = x.value(r * cols + c);
        has_nan = has_nan || std::isnan(v);
        if (!std::isnan(v)) amax = std::max(amax, std::fabs(v));
      }
      const std::uint8_t e = ref_mx_exponent(has_nan && !skip_nan ? NAN : amax, kFormat);
      ASSERT_EQ(scales[static_cast<std::size_t>(r * per_row + c0 / 32)], e)
          << "row " << r << " col " << c0 << " amax " << amax;
      for (std::int64_t c = c0; c < end; ++c) {
        const std::int64_t i = r * cols + c;
        // The element times 2^(127 - e) (exact in double); a block with inf or NaN is all 0x7f
        // (the CPU kernels' choice, Note [MX blocks holding inf or NaN] in fp8_mx_simd.cpp).
        const float v = x.value(i);
        const std::uint8_t want =
            e == 0xff
                ? 0x7f
                : ref_quantize(static_cast<float>(std::ldexp(static_cast<double>(v), 127 - e)),
                               kFormat);
        ASSERT_EQ(q[static_cast<std::size_t>(i)], want) << "element " << i << " value " << v;
        EXPECT_EQ(mx_scale_index(i, cols), r * per_row + c0 / 32);
        // Dequantize: the code's value times 2^(e - 127), rounded to the dtype.
        const Storage back = mx_dequantize_element<kType, kFormat>(
            q[static_cast<std::size_t>(i)],
            scales[static_cast<std::size_t>(mx_scale_index(i, cols))]);
        double want_value =
            e == 0xff ? std::numeric_limits<double>::quiet_NaN()  // 0x7fc00000 in the dtype
                      : ref_fp8_value(want, kFormat) * std::ldexp(1.0, e - 127);
        // A NaN element of a finite block (skip_nan) keeps its code's sign, as a CPU's product.
        if (e != 0xff && std::isnan(want_value))
          want_value = std::copysign(want_value, -(want >> 7));
        const float want_float = static_cast<float>(want_value);
        std::uint64_t got = 0, want_bits = 0;
        std::memcpy(&got, &back, sizeof(Storage));
        switch (kType) {
          case DType::kFloat32:
            want_bits = bits32(want_float);
            break;
          case DType::kFloat64:
            want_bits = bits64(static_cast<double>(want_float));
            break;
          case DType::kFloat16:
            want_bits = testing::float_to_half_ref(want_float);
            break;
          case DType::kBFloat16:
            want_bits = testing::float_to_bf16_ref(want_float);
            break;
        }
        EXPECT_EQ(got, want_bits) << "element " << i << " code " << int{want};
      }
    }
  }
}

TEST(Fp8ElementTest, MxBlocksMatchTheReferenceIncludingShortLastBlocksAndSpecialBlocks) {
  std::mt19937_64 rng(9);
  const std::int64_t shapes[][2] = {{1, 1}, {3, 31}, {2, 32}, {4, 33}, {5, 100}, {2, 64}, {7, 65}};
  for (bool skip_nan : {false, true}) {
    for (const auto& s : shapes) {
      check_mx<DType::kFloat32, Fp8Format::kE4M3>(s[0], s[1], rng, skip_nan);
      check_mx<DType::kFloat32, Fp8Format::kE5M2>(s[0], s[1], rng, skip_nan);
      check_mx<DType::kFloat64, Fp8Format::kE4M3>(s[0], s[1], rng, skip_nan);
      check_mx<DType::kFloat16, Fp8Format::kE4M3>(s[0], s[1], rng, skip_nan);
      check_mx<DType::kBFloat16, Fp8Format::kE4M3>(s[0], s[1], rng, skip_nan);
    }
  }
}

// mx_block_span cuts every row into blocks; each warp's MxWalk visits the blocks b, b + warps, ...
// with the same spans, without dividing.
TEST(Fp8ElementTest, MxBlockSpansTileEveryRowAndTheWarpsWalksVisitEachBlockOnce) {
  for (std::int64_t cols : {1, 31, 32, 33, 64, 100, 1000}) {
    const std::int64_t rows = 7, per_row = (cols + 31) / 32, blocks = rows * per_row;
    std::vector<int> seen(static_cast<std::size_t>(rows * cols), 0);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const MxBlockSpan span = mx_block_span(b, cols);
      ASSERT_GE(span.size, 1);
      ASSERT_LE(span.size, 32);
      EXPECT_EQ(span.begin / cols, b / per_row);                    // within its row
      EXPECT_EQ((span.begin + span.size - 1) / cols, b / per_row);  // ... up to its end
      for (int l = 0; l < span.size; ++l) {
        ++seen[static_cast<std::size_t>(span.begin + l)];
        EXPECT_EQ(mx_scale_index(span.begin + l, cols), b);
      }
    }
    for (int s : seen) ASSERT_EQ(s, 1) << "cols " << cols;
    for (std::int64_t warps : {1, 2, 3, 5, 8, 31, 64, 1000}) {
      std::vector<int> visits(static_cast<std::size_t>(blocks), 0);
      for (std::int64_t w = 0; w < warps; ++w) {
        for (MxWalk walk(cols, w, warps); walk.block() < blocks; walk.next()) {
          const MxBlockSpan want = mx_block_span(walk.block(), cols), got = walk.span();
          ASSERT_EQ(got.begin, want.begin) << "cols " << cols << " warps " << warps;
          ASSERT_EQ(got.size, want.size) << "cols " << cols << " warps " << warps;
          ++visits[static_cast<std::size_t>(walk.block())];
        }
      }
      for (int v : visits) ASSERT_EQ(v, 1) << "cols " << cols << " warps " << warps;
    }
  }
}

// ---- NaN bits, and the atomic amax's ordering argument -------------------------------------

// cpu_mul and the double conversions give what this host's own arithmetic gives for NaN
// operands (Note [NaN bits of the CUDA FP8 kernels]): the CPU kernels' bits.
TEST(Fp8ElementTest, NanOperandsGiveTheHostsOwnBits) {
  std::mt19937 rng(13);
  for (int k = 0; k < 20000; ++k) {
    const std::uint32_t a_bits = k % 2 == 0 ? (rng() | 0x7f800001u) : rng();  // NaN or anything
    const std::uint32_t b_bits = k % 3 == 0 ? (rng() | 0x7f800001u) : rng() & 0x3fffffffu;
    volatile float a = from_bits32(a_bits), b = from_bits32(b_bits);  // computed at run time
    const float host = a * b;
    if (!std::isnan(static_cast<float>(a)) && !std::isnan(static_cast<float>(b))) {
      ASSERT_EQ(bits32(cpu_mul(a, b)), bits32(host)) << std::hex << a_bits << " " << b_bits;
      continue;
    }
    ASSERT_EQ(bits32(cpu_mul(a, b)), bits32(host)) << std::hex << a_bits << " * " << b_bits;
    volatile double d =
        from_bits64((static_cast<std::uint64_t>(rng()) << 32 | rng()) | 0x7ff0000000000001ull);
    const float narrowed = static_cast<float>(d);
    ASSERT_EQ(bits32(Fp8Io<DType::kFloat64>::load(d)), bits32(narrowed));
    volatile float f = a;
    const double widened = static_cast<double>(f);
    ASSERT_EQ(bits64(Fp8Io<DType::kFloat64>::store(f)), bits64(widened));
  }
}

// Note [The NaN-propagating atomic amax] in fp8.cu: atomicMax on the slot's bits as signed ints,
// with candidates abs_bits(...), is the float max with NaN winning, for the slots the kernels see.
TEST(Fp8ElementTest, SignedIntMaxOfAbsBitsIsTheNanPropagatingFloatMax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float slots[] = {0.0f, -0.0f, 1e-45f, 1.5f, 448.0f, 3e38f, HUGE_VALF, nan, -2.0f};
  const float values[] = {0.0f, -0.0f, 1e-40f, -1.5f, 2.0f, -3e38f, -HUGE_VALF, nan, -nan};
  for (float slot : slots) {
    for (float v : values) {
      const auto got =
          std::max(static_cast<std::int32_t>(bits32(slot)), static_cast<std::int32_t>(abs_bits(v)));
      const float result = from_bits32(static_cast<std::uint32_t>(got));
      if (std::isnan(slot) || std::isnan(v)) {
        EXPECT_TRUE(std::isnan(result)) << slot << " " << v;
      } else {
        EXPECT_EQ(result, std::max(slot, std::fabs(v))) << slot << " " << v;
        EXPECT_FALSE(std::signbit(result) && std::fabs(v) > 0.0f);
      }
    }
  }
}

// ---- The delayed update's batches -----------------------------------------------------------

TEST(Fp8ElementTest, DelayedBatchesRunTheRuleOnEveryTensorOnceAsTheReferenceDoes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (AmaxAlgo algo : {AmaxAlgo::kMax, AmaxAlgo::kMostRecent}) {
    DelayedScaling rule;
    rule.history_len = 5;
    rule.algo = algo;
    rule.margin = 1;
    const std::size_t count = 250;  // three launches' worth (96 per launch)
    // Histories interleaved as fp8::Linear's [len, 3] buffer: stride 3, three tensors per buffer.
    std::vector<float> history(static_cast<std::size_t>(rule.history_len) * 3 * (count / 3 + 1));
    std::vector<float> scale(count, 2.0f), scale_inv(count, 0.5f);
    std::mt19937 rng(17);
    for (float& h : history) h = static_cast<float>(rng() % 1000) / 7.0f;
    std::vector<DelayedTensor> tensors(count);
    for (std::size_t t = 0; t < count; ++t) {
      const std::size_t base = t / 3 * static_cast<std::size_t>(rule.history_len) * 3 + t % 3;
      tensors[t] = {&history[base], 3, &scale[t], &scale_inv[t],
                    t % 2 == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2};
      if (t == 10) {  // this iteration's amax 0: kept (kMostRecent)
        history[base] = 0.0f;
      } else if (t == 11) {  // a NaN in the window: skipped by fmaxf (kMax, NanAmax::kIgnore)
        history[base + 6] = nan;
      } else if (t == 12) {  // inf: kept
        history[base] = HUGE_VALF;
      } else if (t == 13) {  // a tiny amax alone: FLT_MAX, not inf (TE PR #786)
        history[base] = 1e-44f;
        for (std::size_t i = 1; i < 5; ++i) history[base + 3 * i] = 0.0f;
      }
    }
    const std::vector<float> before = history;
    // Reference: TE's fused kernel (common/recipe/delayed_scaling.cu, kernel_bulk), written out:
    // a tensor whose slot 0 is 0 is left alone; amax = fmaxf over the window from 0 (NaNs skipped,
    // the rule's default NanAmax::kIgnore) or slot 0; scale = (fp8_max * 2^-margin) / amax.
    std::vector<float> want_h = history, want_scale = scale, want_inv = scale_inv;
    for (std::size_t t = 0; t < count; ++t) {
      const std::size_t base = t / 3 * static_cast<std::size_t>(rule.history_len) * 3 + t % 3;
      const float last = before[base];
      if (last == 0.0f) continue;
      float amax = 0.0f;
      for (int i = 0; i < rule.history_len; ++i) {
        amax = std::fmax(amax, before[base + 3 * static_cast<std::size_t>(i)]);
      }
      if (algo == AmaxAlgo::kMostRecent) amax = last;
      if (std::isfinite(amax) && amax > 0.0f) {
        const double max = t % 2 == 0 ? 448.0 : 57344.0;
        float s = static_cast<float>(std::ldexp(max, -rule.margin)) / amax;
        if (std::isinf(s)) s = std::numeric_limits<float>::max();
        want_scale[t] = s;
      }
      want_inv[t] = static_cast<float>(1.0 / static_cast<double>(want_scale[t]));
      // TE's roll: slot i takes slot i + 1, the last slot takes slot 0; slot 0 starts at zero.
      for (std::size_t i = 0; i < 5; ++i) {
        want_h[base + 3 * i] = before[base + 3 * ((i + 1) % 5)];
      }
      want_h[base] = 0.0f;
    }
    // delayed_update_kernel's launches: batches of 96, thread i on tensor i of its batch.
    std::size_t launches = 0;
    for (std::size_t first = 0; first < count; first += kDelayedPerLaunch, ++launches) {
      const DelayedBatch batch = delayed_batch(tensors.data(), count, first);
      ASSERT_EQ(static_cast<std::size_t>(batch.count), std::min<std::size_t>(96, count - first));
      for (int i = 0; i < batch.count; ++i) {
        ASSERT_EQ(batch.tensors[i].scale, &scale[first + static_cast<std::size_t>(i)]);
        delayed_update_one(batch.tensors[i], rule);
      }
    }
    EXPECT_EQ(launches, 3u);
    for (std::size_t t = 0; t < count; ++t) {
      EXPECT_EQ(bits32(scale[t]), bits32(want_scale[t])) << "tensor " << t;
      EXPECT_EQ(bits32(scale_inv[t]), bits32(want_inv[t])) << "tensor " << t;
    }
    for (std::size_t i = 0; i < history.size(); ++i) {
      if (std::isnan(want_h[i])) {
        EXPECT_TRUE(std::isnan(history[i])) << "history " << i;
      } else {
        EXPECT_EQ(history[i], want_h[i]) << "history " << i;
      }
    }
    EXPECT_EQ(scale[13], std::numeric_limits<float>::max());
    EXPECT_EQ(scale[10], 2.0f) << "amax 0: kept, under both algorithms";
    EXPECT_EQ(history[10 / 3 * 15 + 10 % 3], 0.0f);
    EXPECT_EQ(history[10 / 3 * 15 + 10 % 3 + 3], before[10 / 3 * 15 + 10 % 3 + 3]) << "not rolled";
    if (algo == AmaxAlgo::kMax) EXPECT_NE(scale[11], 2.0f) << "the NaN skipped";
    EXPECT_EQ(scale[12], 2.0f);
  }
}

}  // namespace
}  // namespace mixprec::core::cuda
