// fp16/bf16 <-> float conversions of the SIMD kernels (unscale_simd.cpp, fused_optim_simd.cpp),
// per Highway target: included from inside each kernel file's foreach_target loop, so it has
// Highway's per-target include guard instead of #pragma once. Internal.
#if defined(MIXPREC_CPU_SIMD_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MIXPREC_CPU_SIMD_CONVERT_INL_H_
#undef MIXPREC_CPU_SIMD_CONVERT_INL_H_
#else
#define MIXPREC_CPU_SIMD_CONVERT_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

#include "mixprec/core/half.h"

// Note [16-bit conversions in the SIMD kernels]
// fp16/bf16 are widened to float exactly and rounded back to nearest even, bit for bit as
// include/mixprec/core/half.h does. Highway 1.0.x's own conversions do not all do that:
// DemoteTo(bf16) truncates (and can turn a NaN into inf), and without F16C the emulated fp16
// PromoteTo/DemoteTo mishandle inf/NaN and truncate. So bf16 always, and fp16 on targets without
// F16C, use the integer recipes of half.h below (bf16 two elements per 32-bit lane, which needs
// no shuffles). With F16C (x86 AVX2 and better) the hardware conversions are exact: vcvtph2ps
// widens exactly, and vcvtps2ph with immediate 0 rounds to nearest even and keeps NaN a (quiet)
// NaN. AVX512-BF16's vcvtneps2bf16 is not used: it treats subnormal inputs as zero.
// The conformance suite checks all 65536 inputs of both types on every target.
// bf16 in pairs replaced PromoteTo/DemoteTo lanes: 0.053 instead of 0.084 ns an element in cache
// on one AVX3 core, the same as fp32. Software prefetch was tried and gave nothing measurable.

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
constexpr bool kHardwareF16 = true;
#else
constexpr bool kHardwareF16 = false;
#endif

// fp16 bits (in u32 lanes) -> float, exactly: half_bits_to_float() of half.h.
template <class DF, class VU>
HWY_INLINE hn::Vec<DF> half_to_float(DF df, VU h) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto exponent = hn::And(hn::ShiftRight<10>(h), hn::Set(du, 0x1fu));
  const auto mantissa = hn::And(h, hn::Set(du, 0x3ffu));
  const auto normal = hn::Or(hn::ShiftLeft<23>(hn::Add(exponent, hn::Set(du, 112u))),
                             hn::ShiftLeft<13>(mantissa));
  const auto inf_nan = hn::Or(hn::Set(du, 0x7f800000u), hn::ShiftLeft<13>(mantissa));
  // Subnormal or zero: mantissa * 2^-24 is exact in float.
  const auto subnormal = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mantissa)), hn::Set(df, 5.9604644775390625e-8f)));
  const auto magnitude =
      hn::IfThenElse(hn::Eq(exponent, hn::Set(du, 0x1fu)), inf_nan,
                     hn::IfThenElse(hn::Eq(exponent, hn::Zero(du)), subnormal, normal));
  return hn::BitCast(df, hn::Or(sign, magnitude));
}

// float -> fp16 bits in u32 lanes, to nearest even: float_to_half_bits() of half.h.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> float_to_half(DF df, hn::Vec<DF> f) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto x = hn::BitCast(du, f);
  const auto sign = hn::And(hn::ShiftRight<16>(x), hn::Set(du, 0x8000u));
  const auto a = hn::And(x, hn::Set(du, 0x7fffffffu));
  const auto ai = hn::BitCast(di, a);  // < 2^31, so signed compares order it
  const auto nan = hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(a), hn::Set(du, 0x3ffu)));
  const auto inf = hn::Set(du, 0x7c00u);
  // Below 2^-14 the result is subnormal or zero: adding 0.5 lets the FPU round the units of
  // 2^-24 to nearest even into the low mantissa bits.
  const auto tiny = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), hn::Set(df, 0.5f))),
                            hn::Set(du, 0x3f000000u));
  const auto odd = hn::And(hn::ShiftRight<13>(a), hn::Set(du, 1u));
  const auto rebias = hn::Set(du, (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu);
  const auto normal = hn::ShiftRight<13>(hn::Add(hn::Add(a, rebias), odd));
  auto out = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000))), tiny, normal);
  out = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x477fefff))), inf, out);
  out = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7f800000))), nan, out);
  return hn::Or(sign, out);
}

// Rounds floats to bfloat16 as float_to_bf16_bits() of half.h does, leaving the result in the
// upper 16 bits of each u32 lane (the lower 16 are garbage).
template <class DU, class VF>
HWY_INLINE hn::Vec<DU> bf16_in_upper_half(DU du, VF f) {
  const auto x = hn::BitCast(du, f);
  const auto bias = hn::Add(hn::And(hn::ShiftRight<16>(x), hn::Set(du, 1u)), hn::Set(du, 0x7fffu));
  // A NaN keeps its upper bits and becomes quiet; adding the bias could carry into the sign.
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(f)), hn::Or(x, hn::Set(du, 0x00400000u)),
                        hn::Add(x, bias));
}

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#endif  // MIXPREC_CPU_SIMD_CONVERT_INL_H_
