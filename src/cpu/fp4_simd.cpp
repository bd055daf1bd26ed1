// CPU FP4 kernels, the SIMD loops of the casts (NVFP4 1D blocks of 16, MXFP4 blocks of 32), per
// Highway target with run-time dispatch. Each lane computes what core::float_to_e2m1 computes (the
// seven rounding boundaries of core::e2m1_magnitude as compares), and each block's scale is the
// scalar rule of mixprec/core/fp4.h: the results are bit for bit those of the portable loops in
// fp4.cpp, which the 2D tiles, stochastic rounding and the dequantizes still use.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fp4_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/fp4_simd.h"
#include "cpu/fp8_loops-inl.h"  // the sources (with_src), prefetch_ahead
#include "mixprec/core/fp4.h"

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The E2M1 codes of v's lanes in 32-bit lanes: core::float_to_e2m1 lane by lane, in integer
// arithmetic as core::float_to_fp8_bits does it for FP8. |v| >= 1 (E2M1's normal range): the float
// bits rebiased to E2M1's exponent and rounded to one mantissa bit, to nearest even, by an add of
// 2^21 - 1 plus the kept bit; |v| < 1 (E2M1's subnormals 0 and 0.5, or 1 by rounding up): 2|v|
// rounded to an integer by the FPU's add of 2^23. Past 6 (inf included) the code is clamped to
// 7; NaN lanes become 0x7; the sign is v's.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> e2m1_codes(DF df, hn::Vec<DF> v) {
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(di, v);
  const auto magnitude_bits = hn::And(bits, hn::Set(di, 0x7fffffff));
  // Normal: the exponent field rebiased from 127 to E2M1's 1 (code = e << 1 | m).
  const auto odd = hn::And(hn::ShiftRight<22>(magnitude_bits), hn::Set(di, 1));
  const auto normal = hn::ShiftRight<22>(
      hn::Add(hn::Add(magnitude_bits, hn::Set(di, -(126 << 23) + (1 << 21) - 1)), odd));
  // Subnormal: 2|v| + 2^23 rounds to an integer; its low bits are it.
  const auto twice = hn::Add(hn::Mul(hn::BitCast(df, magnitude_bits), hn::Set(df, 2.0f)),
                             hn::Set(df, 8388608.0f));
  const auto subnormal = hn::Sub(hn::BitCast(di, twice), hn::Set(di, 0x4b000000));
  auto code = hn::IfThenElse(hn::Lt(magnitude_bits, hn::Set(di, 0x3f800000)), subnormal, normal);
  code = hn::Min(code, hn::Set(di, 7));
  code = hn::Or(code, hn::And(hn::ShiftRight<28>(bits), hn::Set(di, 8)));  // the sign bit
  return hn::IfThenElse(hn::Gt(magnitude_bits, hn::Set(di, 0x7f800000)), hn::Set(di, 7), code);
}

// Packs the codes of one vector (an even number of lanes) into lanes / 2 bytes at q: lane 2j in
// the low nibble of byte j, lane 2j + 1 in the high one.
template <class DI>
HWY_INLINE void store_packed(DI di, hn::Vec<DI> codes, std::uint8_t* q) {
  const hn::Repartition<std::uint64_t, DI> d64;
  const auto pairs = hn::BitCast(d64, codes);
  const auto bytes = hn::Or(hn::And(pairs, hn::Set(d64, 0xfu)), hn::ShiftRight<28>(pairs));
  const hn::Rebind<std::uint8_t, decltype(d64)> d8;
  hn::StoreU(hn::TruncateTo(d8, bytes), d8, q);
}

// The max of the magnitude bits of n elements at begin, NaN lanes skipped (skip_nan: TE's fmaxf)
// or kept (their bits exceed inf's: torch.amax's NaN).
template <class Src, int kN>
HWY_INLINE std::uint32_t block_amax_bits(const Src& src, std::int64_t begin, bool skip_nan) {
  using DF = typename Src::DF;
  const DF df;
  const hn::RebindToSigned<DF> di;
  constexpr auto kLanes = static_cast<int>(hn::MaxLanes(DF()));
  auto running = hn::Zero(di);
  for (int k = 0; k < kN; k += kLanes) {
    auto a = hn::And(hn::BitCast(di, src.Load(df, begin + k)), hn::Set(di, 0x7fffffff));
    if (skip_nan) a = hn::IfThenElseZero(hn::Lt(a, hn::Set(di, 0x7f800001)), a);
    running = hn::Max(running, a);
  }
  return static_cast<std::uint32_t>(hn::GetLane(hn::MaxOfLanes(di, running)));
}

// Encodes the kN elements at begin, each times `encode`, into kN / 2 bytes at q.
template <class Src, int kN>
HWY_INLINE void encode_block(const Src& src, std::int64_t begin, float encode, std::uint8_t* q) {
  using DF = typename Src::DF;
  const DF df;
  const hn::RebindToSigned<DF> di;
  constexpr auto kLanes = static_cast<int>(hn::MaxLanes(DF()));
  const auto scale = hn::Set(df, encode);
  for (int k = 0; k < kN; k += kLanes) {
    store_packed(di, e2m1_codes(df, hn::Mul(src.Load(df, begin + k), scale)), q + k / 2);
  }
}

// Whether the SIMD path applies: fixed-length vectors of 2 to 16 lanes (a whole number per block).
template <class Src>
constexpr bool kFixedLanes = !HWY_HAVE_SCALABLE && hn::MaxLanes(typename Src::DF()) >= 2 &&
                             16 % hn::MaxLanes(typename Src::DF()) == 0;

// Note [NVFP4 blocks in three passes]
// Done block by block, each block's work is one long chain (its amax, reduced across lanes, then
// its scale, its encode factor, then the codes), and too few blocks fit in the core's reorder
// window to hide it: the loop ran at 0.65x the 4:1 memory loop. So a chunk of kChunk blocks (4 KB
// of float32, in L1) goes in three passes of short independent chains: the blocks' amaxes; their
// scale codes, a vector of blocks at a time (core::nvfp4_block_scale in lanes, with the vector E4M3
// cast of the FP8 kernels), and their encode factors (nvfp4_block_encode, computed once per code
// and call: 256 divisions); then the codes of each block with its factor. The results are those
// of the rules, bit for bit (the tests run every compiled target).
constexpr std::int64_t kChunk = 64;  // blocks of 16: a multiple of every vector's lane count

void QuantizeNvfp4Blocks(const TensorView& x, float encode_scale, std::uint8_t* q,
                         std::uint8_t* block_scales, std::int64_t first, std::int64_t last) {
  const float decode_scale = 1.0f / encode_scale;
  float encode_of[256];
  for (int c = 0; c < 256; ++c) {
    encode_of[c] = nvfp4_block_encode(static_cast<std::uint8_t>(c), decode_scale);
  }
  with_src(x, [&](const auto& src) HWY_ATTR {
    using Src = std::decay_t<decltype(src)>;
    if constexpr (kFixedLanes<Src>) {
      using DF = typename Src::DF;
      const DF df;
      const hn::RebindToSigned<DF> di;
      constexpr auto kLanes = static_cast<int>(hn::MaxLanes(DF()));
      const hn::ScalableTag<float> dv;  // whole vectors of block amaxes (DF is half for float64)
      const hn::RebindToSigned<decltype(dv)> dvi;
      const hn::Rebind<std::uint8_t, decltype(dv)> dv8;
      const auto factor = hn::Set(dv, encode_scale * (1.0f / 6.0f));  // as nvfp4_block_scale
      HWY_ALIGN float amax[kChunk];
      float encode[kChunk];
      for (std::int64_t chunk = first; chunk < last; chunk += kChunk) {
        const std::int64_t n = std::min<std::int64_t>(kChunk, last - chunk);
        for (std::int64_t j = 0; j < n; ++j) {  // 1: the amaxes, NaN skipped
          const std::int64_t begin = 16 * (chunk + j);
          auto running = hn::Zero(di);
          for (int k = 0; k < 16; k += kLanes) {
            auto a = hn::And(hn::BitCast(di, src.Load(df, begin + k)), hn::Set(di, 0x7fffffff));
            running = hn::Max(running, hn::IfThenElseZero(hn::Lt(a, hn::Set(di, 0x7f800001)), a));
          }
          amax[j] = bits_to_float(static_cast<std::uint32_t>(hn::GetLane(hn::MaxOfLanes(di, running))));
        }
        for (std::int64_t j = n; j < kChunk; ++j) amax[j] = 0.0f;
        for (std::int64_t j = 0; j < n; j += static_cast<std::int64_t>(hn::Lanes(dv))) {  // 2
          const auto scaled = hn::Min(hn::Mul(hn::Load(dv, amax + j), factor), hn::Set(dv, kFltMax));
          const auto codes = hn::BitCast(dvi, to_fp8<Fp8Format::kE4M3>(dv, scaled));
          HWY_ALIGN std::uint8_t bytes[hn::MaxLanes(dv)];
          hn::Store(hn::DemoteTo(dv8, codes), dv8, bytes);
          const std::int64_t m = std::min<std::int64_t>(static_cast<std::int64_t>(hn::Lanes(dv)), n - j);
          for (std::int64_t k = 0; k < m; ++k) {
            block_scales[chunk + j + k] = bytes[k];
            encode[j + k] = encode_of[bytes[k]];
          }
        }
        for (std::int64_t j = 0; j < n; ++j) {  // 3: the codes
          const std::int64_t begin = 16 * (chunk + j);
          // The lines of the chunk after the next (4 KB past this one's 4 KB ahead): memory
          // stays busy while this pass computes.
          prefetch_ahead(src, begin + 16 * kChunk, 16);  // See Note [FP8 casts prefetch]
          const auto e = hn::Set(df, encode[j]);
          for (int k = 0; k < 16; k += kLanes) {
            store_packed(di, e2m1_codes(df, hn::Mul(src.Load(df, begin + k), e)),
                         q + (begin + k) / 2);
          }
        }
      }
    } else {
      for (std::int64_t b = first; b < last; ++b) {
        const std::int64_t begin = 16 * b;
        float v[16];
        float amax = 0.0f;
        for (int i = 0; i < 16; ++i) {
          v[i] = src.At(begin + i);
          const float a = bits_to_float(float_to_bits(v[i]) & 0x7fffffffu);
          if (a > amax) amax = a;  // false for NaN: skipped
        }
        const std::uint8_t s = nvfp4_block_scale(amax, encode_scale);
        block_scales[b] = s;
        const float encode = encode_of[s];
        for (int i = 0; i < 8; ++i) {
          q[begin / 2 + i] = static_cast<std::uint8_t>(float_to_e2m1(v[2 * i] * encode) |
                                                       (float_to_e2m1(v[2 * i + 1] * encode) << 4));
        }
      }
    }
  });
}

void QuantizeMxfp4Blocks(const TensorView& x, MxScaleMode mode, std::uint8_t* q,
                         std::uint8_t* scales, std::int64_t first, std::int64_t last) {
  with_src(x, [&](const auto& src) HWY_ATTR {
    using Src = std::decay_t<decltype(src)>;
    for (std::int64_t b = first; b < last; ++b) {
      const std::int64_t begin = 32 * b;
      prefetch_ahead(src, begin, 32);
      if constexpr (kFixedLanes<Src>) {
        const std::uint32_t bits = block_amax_bits<Src, 32>(src, begin, false);
        const std::uint8_t e = mxfp4_block_exponent(
            bits > 0x7f800000u ? bits_to_float(0x7fc00000u) : bits_to_float(bits), mode);
        scales[b] = e;
        encode_block<Src, 32>(src, begin, mxfp4_element_multiplier(e, mode), q + begin / 2);
      } else {
        float v[32];
        std::uint32_t bits = 0;
        for (int i = 0; i < 32; ++i) {
          v[i] = src.At(begin + i);
          const std::uint32_t a = float_to_bits(v[i]) & 0x7fffffffu;
          bits = a > bits ? a : bits;
        }
        const std::uint8_t e = mxfp4_block_exponent(
            bits > 0x7f800000u ? bits_to_float(0x7fc00000u) : bits_to_float(bits), mode);
        scales[b] = e;
        const float m = mxfp4_element_multiplier(e, mode);
        for (int i = 0; i < 16; ++i) {
          q[begin / 2 + i] = static_cast<std::uint8_t>(float_to_e2m1(v[2 * i] * m) |
                                                       (float_to_e2m1(v[2 * i + 1] * m) << 4));
        }
      }
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(QuantizeNvfp4Blocks);
HWY_EXPORT(QuantizeMxfp4Blocks);

void quantize_nvfp4_blocks(const TensorView& x, float encode_scale, std::uint8_t* q,
                           std::uint8_t* block_scales, std::int64_t first_block,
                           std::int64_t last_block) {
  HWY_DYNAMIC_DISPATCH(QuantizeNvfp4Blocks)(x, encode_scale, q, block_scales, first_block,
                                            last_block);
}

void quantize_mxfp4_blocks(const TensorView& x, MxScaleMode mode, std::uint8_t* q,
                           std::uint8_t* scales, std::int64_t first_block,
                           std::int64_t last_block) {
  HWY_DYNAMIC_DISPATCH(QuantizeMxfp4Blocks)(x, mode, q, scales, first_block, last_block);
}

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
