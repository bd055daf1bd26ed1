// CPU FP8 kernels, the SIMD part: one copy per compiled Highway target (foreach_target.h), picked
// at run time by HWY_DYNAMIC_DISPATCH. Spans run serially on the calling thread; src/cpu/fp8.cpp
// cuts the work into spans and threads. This file: whole spans (amax, quantize, dequantize); MX
// blocks are fp8_mx_simd.cpp's, tiles fp8_tiles_simd.cpp's, the loops they share
// fp8_loops-inl.h's and the element conversions fp8_convert-inl.h's.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fp8_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include "cpu/fp8_loops-inl.h"
#include "cpu/fp8_simd.h"

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float AmaxSpan(const TensorView& x, NanAmax nan) {
  std::uint32_t bits = 0;
  with_src(x, [&](const auto& src) HWY_ATTR {
    bits = nan == NanAmax::kIgnore
               ? quantize_range<Pass::kAmaxSkipNaN, Fp8Format::kE4M3>(src, 0, x.numel, nullptr, 1.0f)
               : quantize_range<Pass::kAmax, Fp8Format::kE4M3>(src, 0, x.numel, nullptr, 1.0f);
  });
  return amax_of_bits(bits);
}

float QuantizeSpan(const TensorView& x, std::uint8_t* q, Fp8Format format, float scale,
                   bool want_amax, NanAmax nan) {
  std::uint32_t bits = 0;
  with_src(x, [&](const auto& src) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      bits = quantize_codes<decltype(f)::value>(src, 0, x.numel, q, scale);
    });
  });
  if (!want_amax) return 0.0f;
  // A span holding NaN, its NaNs skipped (TE): a second read, only of such a rare span.
  if (bits > 0x7f800000u && nan == NanAmax::kIgnore) return AmaxSpan(x, nan);
  return amax_of_bits(bits);
}

void DequantizeSpan(const std::uint8_t* q, Fp8Format format, float scale_inv,
                    const TensorView& out) {
  with_dst(out, [&](const auto& dst) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      dequantize_range<decltype(f)::value>(q, 0, out.numel, scale_inv, dst);
    });
  });
}

// The target this copy was compiled for, so tests can see which one the dispatcher picked.
std::int64_t Fp8CompiledTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(AmaxSpan);
HWY_EXPORT(QuantizeSpan);
HWY_EXPORT(DequantizeSpan);
HWY_EXPORT(Fp8CompiledTarget);

float amax_span(const TensorView& x, NanAmax nan) { return HWY_DYNAMIC_DISPATCH(AmaxSpan)(x, nan); }

float quantize_span(const TensorView& x, std::uint8_t* q, Fp8Format format, float scale,
                    bool want_amax, NanAmax nan) {
  return HWY_DYNAMIC_DISPATCH(QuantizeSpan)(x, q, format, scale, want_amax, nan);
}

void dequantize_span(const std::uint8_t* q, Fp8Format format, float scale_inv,
                     const TensorView& out) {
  HWY_DYNAMIC_DISPATCH(DequantizeSpan)(q, format, scale_inv, out);
}

std::int64_t fp8_dispatched_simd_target() { return HWY_DYNAMIC_DISPATCH(Fp8CompiledTarget)(); }

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
