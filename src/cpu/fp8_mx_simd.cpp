// CPU FP8 kernels, MXFP8 blocks (32 elements of a row, one E8M0 exponent each), per Highway
// target as fp8_simd.cpp's spans; the shared loops are fp8_loops-inl.h's.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fp8_mx_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cstdint>
#include <cstring>

#include "cpu/fp8_loops-inl.h"
#include "cpu/fp8_simd.h"

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Note [MX blocks holding inf or NaN]
// Such a block's exponent is 0xff, the E8M0 NaN, and e8m0_to_inverse() is NaN: every element is
// NaN. Its sign would be that of NaN * x, which IEEE 754 leaves open when x is a NaN too (x86
// passes the first operand's, and a compiler may swap the operands; CUDA gives its canonical
// positive NaN), so these kernels write the positive NaN: code 0x7f, and when dequantizing, the
// quiet NaN 0x7fc00000 in the output dtype.

// Walks the MX blocks first .. last - 1, calling body(block, begin, end) with element indices.
template <class Body>
HWY_INLINE void for_each_block(std::int64_t cols, std::int64_t first, std::int64_t last,
                               const Body& body) {
  const std::int64_t per_row = (cols + 31) / 32;
  std::int64_t row = first / per_row;
  std::int64_t b = first - row * per_row;
  for (std::int64_t k = first; k < last; ++k) {
    const std::int64_t begin = row * cols + b * 32;
    body(k, begin, begin + std::min<std::int64_t>(32, cols - b * 32));
    if (++b == per_row) {
      b = 0;
      ++row;
    }
  }
}

// A whole block of 32 where vectors have a fixed length dividing 32: straight-line code, one
// reduction, and the codes stored four or two vectors at a time (1.4x the speed of the general
// path below, AVX3, in cache). Returns false, having written nothing, where it does not apply: also
// for a block holding NaN when NaNs are skipped (skip_nan).
template <Fp8Format kFormat, class Src>
HWY_INLINE bool quantize_whole_block(const Src& src, std::int64_t begin, std::uint8_t* q,
                                     std::uint8_t* scale, bool skip_nan) {
  using DF = typename Src::DF;
  constexpr std::size_t kLanes = hn::MaxLanes(DF());
  if constexpr (HWY_HAVE_SCALABLE || 32 % kLanes != 0 || kLanes < 4) {
    return false;
  } else {
    const DF df;
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    const auto abs_mask = hn::Set(du, 0x7fffffffu);
    auto running = hn::Zero(di);
    for (std::size_t k = 0; k < 32; k += kLanes) {
      const auto bits = hn::BitCast(du, src.Load(df, begin + static_cast<std::int64_t>(k)));
      running = hn::Max(running, hn::BitCast(di, hn::And(bits, abs_mask)));
    }
    const auto bits = static_cast<std::uint32_t>(hn::GetLane(hn::MaxOfLanes(di, running)));
    if (skip_nan && bits > 0x7f800000u) return false;
    const std::uint8_t e = mx_block_exponent(amax_of_bits(bits), kFormat);
    *scale = e;
    if (e == 0xffu) {  // See Note [MX blocks holding inf or NaN]
      std::memset(q + begin, 0x7f, 32);
      return true;
    }
    const auto vscale = hn::Set(df, e8m0_to_inverse(e));
    const auto codes = [&](std::size_t k) MIXPREC_VECTOR_LAMBDA {  // no NaN in a finite block
      const auto x = hn::BitCast(du, src.Load(df, begin + static_cast<std::int64_t>(k)));
      return to_fp8_scaled<kFormat>(df, x, vscale);
    };
    for (std::size_t k = 0; k + 4 * kLanes <= 32; k += 4 * kLanes) {
      store_codes4(df, codes(k), codes(k + kLanes), codes(k + 2 * kLanes), codes(k + 3 * kLanes),
                   q + begin + k);
    }
    if constexpr (kLanes == 16) store_codes2(df, codes(0), codes(16), q + begin);
    return true;
  }
}

template <Fp8Format kFormat, class Src>
void quantize_mx(const Src& src, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                 std::int64_t first, std::int64_t last, bool skip_nan) {
  for_each_block(
      cols, first, last, [&](std::int64_t k, std::int64_t begin, std::int64_t end) HWY_ATTR {
        prefetch_ahead(src, begin, end - begin);  // See Note [FP8 casts prefetch]
        if (end - begin == 32 &&
            quantize_whole_block<kFormat>(src, begin, q, scales + k, skip_nan)) {
          return;
        }
        std::uint32_t bits = quantize_range<Pass::kAmax, kFormat>(src, begin, end, q, 1.0f);
        const bool has_nan = bits > 0x7f800000u;
        if (has_nan && skip_nan) {
          bits = quantize_range<Pass::kAmaxSkipNaN, kFormat>(src, begin, end, q, 1.0f);
        }
        const std::uint8_t e = mx_block_exponent(amax_of_bits(bits), kFormat);
        scales[k] = e;
        if (e == 0xffu) {  // See Note [MX blocks holding inf or NaN]
          std::memset(q + begin, 0x7f, static_cast<std::size_t>(end - begin));
        } else if (has_nan) {
          // NaNs skipped by the amax (TE): they become the format's NaN, the rest scale as usual.
          quantize_range<Pass::kCodes, kFormat>(src, begin, end, q, e8m0_to_inverse(e));
        } else {
          // A finite block: no NaN, and the scale 2^(127 - e) is positive and finite.
          quantize_range<Pass::kCodesNoNaN, kFormat>(src, begin, end, q, e8m0_to_inverse(e));
        }
      });
}

template <Fp8Format kFormat, class Dst>
void dequantize_mx(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                   const Dst& dst, std::int64_t first, std::int64_t last) {
  for_each_block(cols, first, last,
                 [&](std::int64_t k, std::int64_t begin, std::int64_t end) HWY_ATTR {
                   if (scales[k] == 0xffu) {  // See Note [MX blocks holding inf or NaN]
                     for (std::int64_t i = begin; i < end; ++i)
                       dst.Put(i, bits_to_float(0x7fc00000u));
                   } else {
                     dequantize_range<kFormat>(q, begin, end, e8m0_to_float(scales[k]), dst);
                   }
                 });
}

void QuantizeMxBlocks(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                      Fp8Format format, NanAmax nan, std::int64_t first, std::int64_t last) {
  with_src(x, [&](const auto& src) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      quantize_mx<decltype(f)::value>(src, cols, q, scales, first, last, nan == NanAmax::kIgnore);
    });
  });
}

void DequantizeMxBlocks(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                        Fp8Format format, const TensorView& out, std::int64_t first,
                        std::int64_t last) {
  with_dst(out, [&](const auto& dst) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      dequantize_mx<decltype(f)::value>(q, scales, cols, dst, first, last);
    });
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(QuantizeMxBlocks);
HWY_EXPORT(DequantizeMxBlocks);

void quantize_mx_blocks(const TensorView& x, std::int64_t cols, std::uint8_t* q,
                        std::uint8_t* scales, Fp8Format format, NanAmax nan,
                        std::int64_t first_block, std::int64_t last_block) {
  HWY_DYNAMIC_DISPATCH(QuantizeMxBlocks)(x, cols, q, scales, format, nan, first_block, last_block);
}

void dequantize_mx_blocks(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                          Fp8Format format, const TensorView& out, std::int64_t first_block,
                          std::int64_t last_block) {
  HWY_DYNAMIC_DISPATCH(DequantizeMxBlocks)(q, scales, cols, format, out, first_block, last_block);
}

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
