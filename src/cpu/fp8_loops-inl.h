// The loops the CPU FP8 kernels share, per Highway target: vector walks, the amax / codes pass over
// a range (quantize_range), the dequantizing range, and the dispatch on the dtype and the format.
// Included inside the foreach_target loop of each kernel file (fp8_simd.cpp: whole spans,
// fp8_mx_simd.cpp: MX blocks, fp8_tiles_simd.cpp: tiles), with Highway's per-target include guard
// instead of #pragma once. The kernels are three files so that their copies for every target
// compile in parallel. Internal.
#if defined(MIXPREC_CPU_FP8_LOOPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MIXPREC_CPU_FP8_LOOPS_INL_H_
#undef MIXPREC_CPU_FP8_LOOPS_INL_H_
#else
#define MIXPREC_CPU_FP8_LOOPS_INL_H_
#endif

#include <hwy/highway.h>
#include <hwy/cache_control.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/fp8_convert-inl.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/half.h"
#include "mixprec/core/tensor_view.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

// The per-vector lambdas must be inlined into their loops (GCC kept `step` out of line, with
// spills around each call, at a third of the speed).
#ifndef MIXPREC_VECTOR_LAMBDA
#define MIXPREC_VECTOR_LAMBDA HWY_ATTR __attribute__((always_inline))
#endif

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls step(i) for each whole vector of `lanes` elements in [begin, end), four at a time for
// instruction-level parallelism; returns where the scalar tail starts.
template <class Step>
HWY_INLINE std::int64_t for_each_vector(std::int64_t begin, std::int64_t end, std::int64_t lanes,
                                        const Step& step) {
  std::int64_t i = begin;
  for (; i + 4 * lanes <= end; i += 4 * lanes) {
    step(i);
    step(i + lanes);
    step(i + 2 * lanes);
    step(i + 3 * lanes);
  }
  for (; i + lanes <= end; i += lanes) step(i);
  return i;
}

// Note [FP8 casts prefetch]
// The quantizing loops prefetch every cache line of their input kPrefetchBytes ahead. Two threads
// quantizing fp32 (amax-and-quantize, AVX3_SPR, Debian 13; bench/fp8_benchmark.cpp, minimum of 4
// runs, ms) against a plain loop with the same traffic (read 4 bytes, write 1 per element):
//                        16M elements   64M elements
//   plain loop               1.84-1.96     18.3-18.5
//   no prefetch              2.66-2.97     20.4-21.1
//   one line an iteration    2.39-2.46     17.0-19.0
//   every line, 4 KB ahead   1.90          14.2
//   every line, 8 KB ahead   1.90          14.7
// (2 KB ahead, one line an iteration, was slower than none.) One thread keeps up with memory
// without it; with both cores busy, the conversion's instructions between the loads leave fewer
// of them in flight than the plain loop has, and the prefetches make up for that.
constexpr std::int64_t kPrefetchBytes = 4096;

// Prefetches the lines of elements [i, i + n) of src, kPrefetchBytes ahead.
template <class Src>
HWY_INLINE void prefetch_ahead(const Src& src, std::int64_t i, std::int64_t n) {
  // Integer arithmetic: the addresses may lie past the tensor (a prefetch never faults).
  const auto ahead = reinterpret_cast<std::uintptr_t>(src.p + i) + kPrefetchBytes;
  const auto size = n * static_cast<std::int64_t>(sizeof(*src.p));
  for (std::int64_t b = 0; b < size; b += 64) {
    hwy::Prefetch(reinterpret_cast<const char*>(ahead + static_cast<std::uintptr_t>(b)));
  }
}

// The running maximum of |x| bits, as a float (NaN canonical).
HWY_INLINE float amax_of_bits(std::uint32_t bits) {
  return bits > 0x7f800000u ? bits_to_float(0x7fc00000u) : bits_to_float(bits);
}

// ---- The loops --------------------------------------------------------------------------------

// What quantize_range does: the amax only; the amax of the elements that are not NaN (TE's fmaxf,
// NanAmax::kIgnore); codes for any scale; codes by to_fp8_scaled(), for 0 < scale < inf, which are
// right only where no element is NaN.
enum class Pass { kAmax, kAmaxSkipNaN, kCodes, kCodesNoNaN };

// Elements [begin, end): q = fp8(float(x) * scale) unless kPass is an amax pass; returns the
// running maximum of |float(x)|'s bits (see amax_of_bits), NaNs left out by kAmaxSkipNaN.
template <Pass kPass, Fp8Format kFormat, class Src>
HWY_INLINE std::uint32_t quantize_range(const Src& src, std::int64_t begin, std::int64_t end,
                                        std::uint8_t* HWY_RESTRICT q, float scale) {
  using DF = typename Src::DF;
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto abs_mask = hn::Set(du, 0x7fffffffu);
  const auto vscale = hn::Set(df, scale);
  auto running = hn::Zero(di);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  // Loads one vector, tracks its amax and returns its codes.
  const auto step = [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
    const auto v = src.Load(df, i);
    const auto x = hn::BitCast(du, v);
    const auto a = hn::And(x, abs_mask);
    running = hn::Max(running, hn::BitCast(di, a));
    if constexpr (kPass == Pass::kCodesNoNaN) {
      return to_fp8_scaled<kFormat>(df, x, vscale);
    } else {
      return to_fp8<kFormat>(df, hn::Mul(v, vscale));
    }
  };
  std::int64_t tail = begin;
  if constexpr (kPass == Pass::kAmaxSkipNaN) {
    const auto above_inf = hn::Set(di, 0x7f800001);  // the least NaN bits (Lt: old Highway's)
    tail = for_each_vector(begin, end, lanes, [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
      const auto a = hn::BitCast(di, hn::And(hn::BitCast(du, src.Load(df, i)), abs_mask));
      running = hn::Max(running, hn::IfThenElseZero(hn::Lt(a, above_inf), a));  // NaN bits: 0
    });
  } else if constexpr (kPass != Pass::kAmax) {
    for (; tail + 4 * lanes <= end; tail += 4 * lanes) {
      prefetch_ahead(src, tail, 4 * lanes);  // See Note [FP8 casts prefetch]
      const auto c0 = step(tail), c1 = step(tail + lanes);
      const auto c2 = step(tail + 2 * lanes), c3 = step(tail + 3 * lanes);
      store_codes4(df, c0, c1, c2, c3, q + tail);
    }
    for (; tail + lanes <= end; tail += lanes) {
      hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, step(tail))), d8, q + tail);
    }
  } else {
    tail = for_each_vector(begin, end, lanes, [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
      running =
          hn::Max(running, hn::BitCast(di, hn::And(hn::BitCast(du, src.Load(df, i)), abs_mask)));
    });
  }
  auto bits = static_cast<std::uint32_t>(hn::GetLane(hn::MaxOfLanes(di, running)));
  for (std::int64_t i = tail; i < end; ++i) {
    const float f = src.At(i);
    const std::uint32_t a = float_to_bits(f) & 0x7fffffffu;
    if (kPass != Pass::kAmaxSkipNaN || a <= 0x7f800000u) bits = std::max(bits, a);
    if constexpr (kPass == Pass::kCodes || kPass == Pass::kCodesNoNaN) {
      q[i] = float_to_fp8_bits(f * scale, kFormat);
    }
  }
  return bits;
}

// Codes and the amax bits of [begin, end): by to_fp8_scaled() where the scale allows, again by
// to_fp8() in the rare range that holds a NaN.
template <Fp8Format kFormat, class Src>
HWY_INLINE std::uint32_t quantize_codes(const Src& src, std::int64_t begin, std::int64_t end,
                                        std::uint8_t* HWY_RESTRICT q, float scale) {
  if (scale > 0.0f && scale < bits_to_float(0x7f800000u)) {
    const std::uint32_t bits =
        quantize_range<Pass::kCodesNoNaN, kFormat>(src, begin, end, q, scale);
    if (bits <= 0x7f800000u) return bits;
  }
  return quantize_range<Pass::kCodes, kFormat>(src, begin, end, q, scale);
}

// out[i] = dtype(fp8(q[i]) * scale_inv) for i in [begin, end).
template <Fp8Format kFormat, class Dst>
HWY_INLINE void dequantize_range(const std::uint8_t* HWY_RESTRICT q, std::int64_t begin,
                                 std::int64_t end, float scale_inv, const Dst& dst) {
  using DF = typename Dst::DF;
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto vscale = hn::Set(df, scale_inv);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t tail =
      for_each_vector(begin, end, lanes, [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
        const auto b = hn::PromoteTo(du, hn::LoadU(d8, q + i));
        dst.Store(df, hn::Mul(from_fp8<kFormat>(df, b), vscale), i);
      });
  for (std::int64_t i = tail; i < end; ++i)
    dst.Put(i, fp8_bits_to_float(q[i], kFormat) * scale_inv);
}

// ---- Dispatch on the dtype and the format -----------------------------------------------------

// Calls fn(src) with the source of x's dtype.
template <class Fn>
HWY_INLINE void with_src(const TensorView& x, const Fn& fn) {
  switch (x.dtype) {
    case DType::kFloat32:
      fn(F32Src{static_cast<const float*>(x.data)});
      return;
    case DType::kFloat64:
      fn(F64Src{static_cast<const double*>(x.data)});
      return;
    case DType::kFloat16:
      fn(F16Src{static_cast<const std::uint16_t*>(x.data)});
      return;
    case DType::kBFloat16:
      fn(BF16Src{static_cast<const std::uint16_t*>(x.data)});
      return;
  }
}

template <class Fn>
HWY_INLINE void with_dst(const TensorView& out, const Fn& fn) {
  switch (out.dtype) {
    case DType::kFloat32:
      fn(F32Dst{static_cast<float*>(out.data)});
      return;
    case DType::kFloat64:
      fn(F64Dst{static_cast<double*>(out.data)});
      return;
    case DType::kFloat16:
      fn(F16Dst{static_cast<std::uint16_t*>(out.data)});
      return;
    case DType::kBFloat16:
      fn(BF16Dst{static_cast<std::uint16_t*>(out.data)});
      return;
  }
}

// Calls fn(std::integral_constant<Fp8Format, format>) so the format is a compile-time constant.
template <class Fn>
HWY_INLINE void with_format(Fp8Format format, const Fn& fn) {
  if (format == Fp8Format::kE4M3) {
    fn(std::integral_constant<Fp8Format, Fp8Format::kE4M3>());
  } else {
    fn(std::integral_constant<Fp8Format, Fp8Format::kE5M2>());
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#endif  // MIXPREC_CPU_FP8_LOOPS_INL_H_
