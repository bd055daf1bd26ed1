// The FP8 element conversions of the SIMD kernels (src/cpu/fp8_*simd.cpp), per Highway target:
// float <-> fp8 codes in 32-bit lanes, the input dtypes widened to float and the output dtypes
// stored from it. Included inside the kernel file's foreach_target loop (Highway's per-target
// include guard instead of #pragma once). Internal.
#if defined(MIXPREC_CPU_FP8_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MIXPREC_CPU_FP8_CONVERT_INL_H_
#undef MIXPREC_CPU_FP8_CONVERT_INL_H_
#else
#define MIXPREC_CPU_FP8_CONVERT_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "cpu/simd_convert-inl.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/half.h"

// Note [FP8 casts in integer lanes]
// float -> fp8 is float_to_fp8_bits() of mixprec/core/fp8.h, bit for bit, with one float add doing
// all the rounding: |v|, clamped to fp8_max (saturation), is added to a "magic" float of the binade
// 2^(E + 23 - mantissa_bits), E being the binade of |v| (no lower than the smallest normal's, which
// gives the subnormal step). The magic's ulp is the fp8 step of the binade, so the FPU rounds
// |v| / step to nearest even, the rounding the header's integer adds (normal range) and "+ 2^23"
// (subnormals) make. The magic also holds, in ulps, the binade's first code less 2^mantissa_bits
// (a multiple of 2^mantissa_bits, so the parity is the count's): the low 7 bits of the sum are then
// the code (a count of 2^(mantissa_bits + 1) carries into the next binade's first code), and one
// bit select puts the sign above them. On AVX-512 the magic comes from a table of the format's
// binades indexed by the exponent (one permute), |v * scale| is clamped by one range instruction
// and the select is one ternary-logic instruction: a code in 8 vector instructions from v (the
// multiply included, the store not), 14 before the table, clamp and select (2026-12-07), about 19
// with the header's two paths. NaN is one more select. (The range instruction returns the other
// operand where one is NaN, as fmax does: it cannot take the amax, which must see NaN.)
// fp8 -> float decodes the fields (subnormals as an exact int -> float convert times the step).
// Only the multiply by the scale rounds, as in the scalar code. The inputs are widened to float
// first, exactly (fp16, bf16) or to nearest (float64, as float(x)). amax is a running maximum of
// |x|'s float bits as signed integers: positive floats order as their bits and every NaN is above
// inf, so it is NaN exactly when some element is (NaN-propagating, as torch.max).
// tests/core/fp8_test.cpp checks every compiled target against the scalar functions.

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The constants of a format, as float_to_fp8_bits() derives them.
template <Fp8Format kFormat>
struct Fmt {
  static constexpr bool kE4M3 = kFormat == Fp8Format::kE4M3;
  static constexpr int kMantissa = kE4M3 ? 3 : 2;
  static constexpr int kBias = kE4M3 ? 7 : 15;
  static constexpr int kShift = 23 - kMantissa;
  static constexpr std::int32_t kMaxBits = kE4M3 ? 0x43e00000 : 0x47600000;  // 448, 57344
  static constexpr std::int32_t kMinNormalBits = (127 + 1 - kBias) << 23;
  // Added to a binade 2^E's bits: 2^(E + kShift), whose ulp is that binade's fp8 step.
  static constexpr std::uint32_t kMagicShift = static_cast<std::uint32_t>(kShift) << 23;
  // code = count + (binade bits >> kShift) - kCodeBias = count + ((E + bias - 1) << kMantissa).
  static constexpr std::uint32_t kCodeBias = static_cast<std::uint32_t>(127 - kBias + 1)
                                             << kMantissa;
  static constexpr std::uint32_t kRebias = static_cast<std::uint32_t>(127 - kBias) << 23;
  static constexpr std::uint32_t kUnitBits = static_cast<std::uint32_t>(127 + 1 - kBias - kMantissa)
                                             << 23;
};

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// fp8_magnitude()'s magics for the table indices first .. first + 15, an index being a binade's
// exponent field modulo 16 (E4M3: 15 binades from the smallest normal's) or 32 (E5M2: 30).
template <Fp8Format kFormat>
HWY_INLINE __m512i magic_table(std::uint32_t first) {
  using F = Fmt<kFormat>;
  constexpr std::uint32_t kMinField = F::kMinNormalBits >> 23;
  constexpr std::uint32_t kMask = F::kE4M3 ? 15 : 31;
  alignas(64) std::uint32_t t[16];
  for (std::uint32_t i = 0; i < 16; ++i) {
    const std::uint32_t binade = (kMinField + ((first + i - kMinField) & kMask)) << 23;
    t[i] = binade + (binade >> F::kShift) + F::kMagicShift - F::kCodeBias;
  }
  return _mm512_load_si512(t);
}
#endif

// The code of the floats with bits `a`, non-negative and at most fp8_max's (not NaN), in the low 7
// bits of the result; bits 7 to 22 are 0, bits 23 and up are not part of the code. See Note [FP8
// casts in integer lanes].
template <Fp8Format kFormat, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> fp8_magnitude(DF df,
                                                           hn::Vec<hn::RebindToUnsigned<DF>> a) {
  using F = Fmt<kFormat>;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (sizeof(a.raw) == 64) {
    // The magic from a table of the binades, indexed by the exponent's low bits.
    const auto field = hn::ShiftRight<23>(
        hn::BitCast(du, hn::Max(hn::BitCast(di, a), hn::Set(di, F::kMinNormalBits))));
    __m512i magic;
    if constexpr (F::kE4M3) {
      magic = _mm512_permutexvar_epi32(field.raw, magic_table<kFormat>(0));
    } else {
      magic =
          _mm512_permutex2var_epi32(magic_table<kFormat>(0), field.raw, magic_table<kFormat>(16));
    }
    return hn::BitCast(du,
                       hn::Add(hn::BitCast(df, a), hn::BitCast(df, hn::Vec<decltype(du)>{magic})));
  }
#endif
  // The binade's exponent bits, no lower than the smallest normal's (the subnormal step).
  const auto binade = hn::BitCast(du, hn::Max(hn::BitCast(di, hn::And(a, hn::Set(du, 0x7f800000u))),
                                              hn::Set(di, F::kMinNormalBits)));
  // 2^(E + kShift) plus the binade's first code, less 2^kMantissa, in ulps (fp8 steps).
  const auto magic = hn::Add(hn::Add(binade, hn::ShiftRight<F::kShift>(binade)),
                             hn::Set(du, F::kMagicShift - F::kCodeBias));
  return hn::BitCast(du, hn::Add(hn::BitCast(df, a), hn::BitCast(df, magic)));
}

// The code with magnitude m's low 7 bits (as fp8_magnitude returns it) and the sign of the floats
// with bits x: one ternary-logic instruction after the shift on AVX-512.
template <class VU>
HWY_INLINE VU fp8_signed(VU m, VU x) {
  const hn::DFromV<VU> du;
  const auto sign = hn::ShiftRight<24>(x);  // the sign in bit 7 (bits 0-6: x's exponent)
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  constexpr int kSelect = 0xe4;  // c ? a : b, bit by bit
  const auto low7 = hn::Set(du, 0x7fu);
  if constexpr (sizeof(m.raw) == 64) {
    return VU{_mm512_ternarylogic_epi32(m.raw, sign.raw, low7.raw, kSelect)};
  } else if constexpr (sizeof(m.raw) == 32) {
    return VU{_mm256_ternarylogic_epi32(m.raw, sign.raw, low7.raw, kSelect)};
  } else if constexpr (sizeof(m.raw) == 16) {
    return VU{_mm_ternarylogic_epi32(m.raw, sign.raw, low7.raw, kSelect)};
  }
#endif
  return hn::Or(hn::And(m, hn::Set(du, 0x7fu)), hn::And(sign, hn::Set(du, 0x80u)));
}

// The bits of min(|v|, fp8_max) for v not NaN (the range instruction would return fp8_max for
// NaN): one instruction on AVX-512 (DQ).
template <Fp8Format kFormat, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> fp8_clamped_abs(DF df, hn::Vec<DF> v) {
  using F = Fmt<kFormat>;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  constexpr int kMinAbsSignClear = 0x0a;  // imm8[1:0] = min |.|, imm8[3:2] = sign cleared
  const auto limit = hn::BitCast(df, hn::Set(di, F::kMaxBits));
  if constexpr (sizeof(v.raw) == 64) {
    return hn::BitCast(du, hn::Vec<DF>{_mm512_range_ps(v.raw, limit.raw, kMinAbsSignClear)});
  } else if constexpr (sizeof(v.raw) == 32) {
    return hn::BitCast(du, hn::Vec<DF>{_mm256_range_ps(v.raw, limit.raw, kMinAbsSignClear)});
  } else if constexpr (sizeof(v.raw) == 16) {
    return hn::BitCast(du, hn::Vec<DF>{_mm_range_ps(v.raw, limit.raw, kMinAbsSignClear)});
  }
#endif
  const auto ai = hn::BitCast(di, hn::And(hn::BitCast(du, v), hn::Set(du, 0x7fffffffu)));
  return hn::BitCast(du, hn::Min(ai, hn::Set(di, F::kMaxBits)));
}

// float -> fp8 codes in u32 lanes: float_to_fp8_bits().
template <Fp8Format kFormat, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> to_fp8(DF df, hn::Vec<DF> f) {
  using F = Fmt<kFormat>;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto x = hn::BitCast(du, f);
  const auto ai = hn::BitCast(di, hn::And(x, hn::Set(du, 0x7fffffffu)));
  // Clamped to fp8_max as signed integers: saturation, NaN too (its code is the select's).
  const auto a = hn::BitCast(du, hn::Min(ai, hn::Set(di, F::kMaxBits)));
  const auto m = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7f800000))),
                                hn::Set(du, 0x7fu), fp8_magnitude<kFormat>(df, a));
  return fp8_signed(m, x);
}

// The codes of v * scale for 0 < scale < inf and v (bits x) not NaN: no NaN select, and |v * scale|
// clamped by one instruction on AVX-512.
template <Fp8Format kFormat, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> to_fp8_scaled(DF df,
                                                           hn::Vec<hn::RebindToUnsigned<DF>> x,
                                                           hn::Vec<DF> scale) {
  const auto a = fp8_clamped_abs<kFormat>(df, hn::Mul(hn::BitCast(df, x), scale));
  return fp8_signed(fp8_magnitude<kFormat>(df, a), x);
}

// Stores two vectors of 16 codes as 32 bytes at p (AVX3; else one vector at a time).
template <class DF, class VU>
HWY_INLINE void store_codes2(DF df, VU c0, VU c1, std::uint8_t* HWY_RESTRICT p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(DF()) == 16 && sizeof(hn::TFromD<DF>) == 4) {
    const __m512i ab = _mm512_packs_epi32(c0.raw, c1.raw);
    const __m512i bytes = _mm512_packus_epi16(ab, ab);  // block k: a_k b_k a_k b_k
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, bytes)));
    return;
  }
#endif
  const hn::Rebind<std::uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, c0)), d8, p);
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, c1)), d8, p + hn::Lanes(df));
}

template <class DF, class VU>
HWY_INLINE void store_codes4(DF df, VU c0, VU c1, VU c2, VU c3, std::uint8_t* HWY_RESTRICT p) {
  [[maybe_unused]] constexpr std::size_t kLanes = hn::MaxLanes(DF());
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kLanes == 16 && sizeof(hn::TFromD<DF>) == 4) {
    const __m512i ab = _mm512_packs_epi32(c0.raw, c1.raw);  // per 128-bit block: a, b
    const __m512i cd = _mm512_packs_epi32(c2.raw, c3.raw);
    const __m512i bytes = _mm512_packus_epi16(ab, cd);  // block k: a_k b_k c_k d_k
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(p, _mm512_permutexvar_epi32(order, bytes));
    return;
  }
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  if constexpr (kLanes == 8 && sizeof(hn::TFromD<DF>) == 4) {
    const __m256i ab = _mm256_packs_epi32(c0.raw, c1.raw);
    const __m256i cd = _mm256_packs_epi32(c2.raw, c3.raw);
    const __m256i bytes = _mm256_packus_epi16(ab, cd);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permutevar8x32_epi32(bytes, order));
    return;
  }
#elif HWY_ARCH_X86 && (HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3)
  if constexpr (kLanes == 4 && sizeof(hn::TFromD<DF>) == 4) {
    const __m128i ab = _mm_packs_epi32(c0.raw, c1.raw);
    const __m128i cd = _mm_packs_epi32(c2.raw, c3.raw);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(ab, cd));
    return;
  }
#endif
  const hn::Rebind<std::uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  const auto lanes = hn::Lanes(df);
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, c0)), d8, p);
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, c1)), d8, p + lanes);
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, c2)), d8, p + 2 * lanes);
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, c3)), d8, p + 3 * lanes);
}

// fp8 codes in u32 lanes -> float: fp8_bits_to_float().
template <Fp8Format kFormat, class DF>
HWY_INLINE hn::Vec<DF> from_fp8(DF df, hn::Vec<hn::RebindToUnsigned<DF>> b) {
  using F = Fmt<kFormat>;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto sign = hn::ShiftLeft<24>(hn::And(b, hn::Set(du, 0x80u)));
  const auto m = hn::And(b, hn::Set(du, 0x7fu));
  const auto mi = hn::BitCast(di, m);
  const auto normal = hn::Add(hn::ShiftLeft<F::kShift>(m), hn::Set(du, F::kRebias));
  const auto mantissa = hn::And(m, hn::Set(du, (1u << F::kMantissa) - 1u));
  const auto subnormal = hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mantissa)),
                                                 hn::BitCast(df, hn::Set(du, F::kUnitBits))));
  auto magnitude = hn::IfThenElse(hn::RebindMask(du, hn::Lt(mi, hn::Set(di, 1 << F::kMantissa))),
                                  subnormal, normal);
  const auto nan = hn::Set(du, 0x7fc00000u);
  if constexpr (F::kE4M3) {
    magnitude = hn::IfThenElse(hn::Eq(m, hn::Set(du, 0x7fu)), nan, magnitude);
  } else {
    const auto special =
        hn::IfThenElse(hn::Eq(m, hn::Set(du, 0x7cu)), hn::Set(du, 0x7f800000u), nan);
    magnitude =
        hn::IfThenElse(hn::RebindMask(du, hn::Gt(mi, hn::Set(di, 0x7b))), special, magnitude);
  }
  return hn::BitCast(df, hn::Or(sign, magnitude));
}

// ---- Sources (the input dtypes, widened to float) and destinations (the output dtypes) --------
// DF is the float tag of one vector's elements: a whole vector, or half of one for float64.

struct F32Src {
  using DF = hn::ScalableTag<float>;
  const float* p;
  HWY_INLINE hn::Vec<DF> Load(DF df, std::int64_t i) const { return hn::LoadU(df, p + i); }
  float At(std::int64_t i) const { return p[i]; }
};

struct F64Src {
  using DF = hn::Rebind<float, hn::ScalableTag<double>>;
  const double* p;
  HWY_INLINE hn::Vec<DF> Load(DF df, std::int64_t i) const {
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
    // These targets' DemoteTo clamps to +-FLT_MAX (infinities too); float(x) rounds instead.
    HWY_ALIGN float lanes[hn::MaxLanes(DF())];
    for (std::size_t k = 0; k < hn::Lanes(df); ++k) lanes[k] = static_cast<float>(p[i + k]);
    return hn::Load(df, lanes);
#else
    return hn::DemoteTo(df, hn::LoadU(hn::Rebind<double, DF>(), p + i));  // cvtpd2ps: rounds
#endif
  }
  float At(std::int64_t i) const { return static_cast<float>(p[i]); }
};

// fp16: the hardware conversion where F16C has it, else the integer recipe.
// See Note [16-bit conversions in the SIMD kernels] (src/cpu/simd_convert-inl.h).
struct F16Src {
  using DF = hn::ScalableTag<float>;
  const std::uint16_t* p;
  HWY_INLINE hn::Vec<DF> Load(DF df, std::int64_t i) const {
    if constexpr (kHardwareF16) {
      const hn::Rebind<hwy::float16_t, DF> df16;
      return hn::PromoteTo(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p) + i));
    } else {
      const hn::Rebind<std::uint16_t, DF> du16;
      return half_to_float(df, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(du16, p + i)));
    }
  }
  float At(std::int64_t i) const { return half_bits_to_float(p[i]); }
};

struct BF16Src {
  using DF = hn::ScalableTag<float>;
  const std::uint16_t* p;
  HWY_INLINE hn::Vec<DF> Load(DF df, std::int64_t i) const {
    const hn::Rebind<std::uint16_t, DF> du16;
    const hn::RebindToUnsigned<DF> du;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, p + i))));
  }
  float At(std::int64_t i) const { return bf16_bits_to_float(p[i]); }
};

struct F32Dst {
  using DF = hn::ScalableTag<float>;
  float* p;
  HWY_INLINE void Store(DF df, hn::Vec<DF> v, std::int64_t i) const { hn::StoreU(v, df, p + i); }
  void Put(std::int64_t i, float f) const { p[i] = f; }
};

struct F64Dst {
  using DF = hn::Rebind<float, hn::ScalableTag<double>>;
  double* p;
  HWY_INLINE void Store(DF, hn::Vec<DF> v, std::int64_t i) const {
    const hn::Rebind<double, DF> dd;
    hn::StoreU(hn::PromoteTo(dd, v), dd, p + i);
  }
  void Put(std::int64_t i, float f) const { p[i] = static_cast<double>(f); }
};

struct F16Dst {
  using DF = hn::ScalableTag<float>;
  std::uint16_t* p;
  HWY_INLINE void Store(DF df, hn::Vec<DF> v, std::int64_t i) const {
    if constexpr (kHardwareF16) {
      const hn::Rebind<hwy::float16_t, DF> df16;
      hn::StoreU(hn::DemoteTo(df16, v), df16, reinterpret_cast<hwy::float16_t*>(p) + i);
    } else {
      const hn::Rebind<std::uint16_t, DF> du16;
      // < 2^16, so the saturating demotion is exact.
      hn::StoreU(hn::DemoteTo(du16, hn::BitCast(hn::RebindToSigned<DF>(), float_to_half(df, v))),
                 du16, p + i);
    }
  }
  void Put(std::int64_t i, float f) const { p[i] = float_to_half_bits(f); }
};

struct BF16Dst {
  using DF = hn::ScalableTag<float>;
  std::uint16_t* p;
  HWY_INLINE void Store(DF, hn::Vec<DF> v, std::int64_t i) const {
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<std::uint16_t, DF> du16;
    const auto bits = hn::ShiftRight<16>(bf16_in_upper_half(du, v));
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(hn::RebindToSigned<DF>(), bits)), du16, p + i);
  }
  void Put(std::int64_t i, float f) const { p[i] = float_to_bf16_bits(f); }
};

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#endif  // MIXPREC_CPU_FP8_CONVERT_INL_H_
