// CPU unscale-and-check, the SIMD part: one Highway kernel per compiled target (foreach_target.h),
// picked at run time by HWY_DYNAMIC_DISPATCH. It walks views serially on the calling thread; the
// driver in unscale.cpp splits the work into pieces and across threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/unscale_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cstdint>

#include "cpu/simd_convert-inl.h"
#include "cpu/unscale_targets.h"
#include "mixprec/core/half.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls step(i) for each whole vector of `lanes` elements in [0, n), four at a time for
// instruction-level parallelism; returns where the scalar tail starts.
template <class Step>
HWY_INLINE std::int64_t for_each_vector(std::int64_t n, std::int64_t lanes, const Step& step) {
  std::int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    step(i);
    step(i + lanes);
    step(i + 2 * lanes);
    step(i + 3 * lanes);
  }
  for (; i + lanes <= n; i += lanes) step(i);
  return i;
}

// Finiteness on the stored bits: with the sign cleared, a value is inf or NaN exactly when its
// bits as a signed integer are >= the all-ones exponent. We keep the running maximum and compare
// once per view (AND + MAX a vector instead of AND + compare + OR).
template <class DI>
HWY_INLINE bool any_at_least(DI di, hn::Vec<DI> running_max, hn::TFromD<DI> exponent_bits) {
  using T = hn::TFromD<DI>;
  return !hn::AllFalse(di, hn::Gt(running_max, hn::Set(di, static_cast<T>(exponent_bits - 1))));
}

template <typename T, typename TI, TI kAbsMask, TI kExpBits>
HWY_INLINE bool unscale_wide(T* HWY_RESTRICT p, std::int64_t n, T inv_scale) {
  const hn::ScalableTag<T> d;
  const hn::RebindToSigned<decltype(d)> di;
  const auto abs_mask = hn::Set(di, kAbsMask);
  const auto inv = hn::Set(d, inv_scale);
  auto running = hn::Zero(di);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t tail;
  if (inv_scale == T(1)) {
    tail = for_each_vector(n, lanes, [&](std::int64_t i) HWY_ATTR {
      running = hn::Max(running, hn::And(hn::BitCast(di, hn::LoadU(d, p + i)), abs_mask));
    });
  } else {
    tail = for_each_vector(n, lanes, [&](std::int64_t i) HWY_ATTR {
      const auto v = hn::LoadU(d, p + i);
      running = hn::Max(running, hn::And(hn::BitCast(di, v), abs_mask));
      hn::StoreU(hn::Mul(v, inv), d, p + i);
    });
  }
  bool found = any_at_least(di, running, kExpBits);
  for (std::int64_t i = tail; i < n; ++i) {
    found |= is_nonfinite(p[i]);
    if (inv_scale != T(1)) p[i] *= inv_scale;
  }
  return found;
}

// fp16 storage, computed in float. See Note [16-bit conversions in the SIMD kernels].
HWY_INLINE bool unscale_half(std::uint16_t* HWY_RESTRICT p, std::int64_t n, float inv_scale) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::RebindToSigned<decltype(df)> di32;
  const hn::Rebind<std::uint16_t, decltype(df)> du16;  // half-width: one u16 per float lane
  const hn::RebindToSigned<decltype(du16)> di16;
  const auto abs_mask = hn::Set(di16, static_cast<std::int16_t>(0x7fff));
  const auto inv = hn::Set(df, inv_scale);
  auto running = hn::Zero(di16);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t tail;
  if (inv_scale == 1.0f) {
    tail = for_each_vector(n, lanes, [&](std::int64_t i) HWY_ATTR {
      running = hn::Max(running, hn::And(hn::BitCast(di16, hn::LoadU(du16, p + i)), abs_mask));
    });
  } else if (kHardwareF16) {
    const hn::Rebind<hwy::float16_t, decltype(df)> df16;
    auto* ph = reinterpret_cast<hwy::float16_t*>(p);
    tail = for_each_vector(n, lanes, [&](std::int64_t i) HWY_ATTR {
      const auto v = hn::LoadU(df16, ph + i);
      running = hn::Max(running, hn::And(hn::BitCast(di16, v), abs_mask));
      hn::StoreU(hn::DemoteTo(df16, hn::Mul(hn::PromoteTo(df, v), inv)), df16, ph + i);
    });
  } else {
    tail = for_each_vector(n, lanes, [&](std::int64_t i) HWY_ATTR {
      const auto v = hn::LoadU(du16, p + i);
      running = hn::Max(running, hn::And(hn::BitCast(di16, v), abs_mask));
      const auto out = float_to_half(df, hn::Mul(half_to_float(df, hn::PromoteTo(du32, v)), inv));
      // out < 2^16, so the saturating demotion is exact.
      hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, out)), du16, p + i);
    });
  }
  bool found = any_at_least(di16, running, static_cast<std::int16_t>(0x7c00));
  for (std::int64_t i = tail; i < n; ++i) {
    found |= half_bits_nonfinite(p[i]);
    if (inv_scale != 1.0f) p[i] = float_to_half_bits(half_bits_to_float(p[i]) * inv_scale);
  }
  return found;
}

// bf16 storage, computed in float. Each u32 lane holds two bf16 elements; both halves are
// widened in place (shift or mask), so no lane shuffles are needed and each element goes back
// to the half it came from, whatever the byte order.
HWY_INLINE bool unscale_bf16(std::uint16_t* HWY_RESTRICT p, std::int64_t n, float inv_scale) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::RebindToSigned<decltype(df)> di32;
  const auto upper = hn::Set(du32, 0xffff0000u);
  const auto abs_mask = hn::Set(di32, 0x7fffffff);
  const auto inv = hn::Set(df, inv_scale);
  auto running = hn::Zero(di32);
  // The widened floats' bits: the upper element is w itself (its lower half can only add less
  // than one exponent step, so the running maximum still finds inf/NaN), the lower one w << 16.
  const auto track = [&](hn::Vec<decltype(du32)> w, hn::Vec<decltype(du32)> lo_bits) HWY_ATTR {
    running = hn::Max(running, hn::Max(hn::And(hn::BitCast(di32, w), abs_mask),
                                       hn::And(hn::BitCast(di32, lo_bits), abs_mask)));
  };
  const auto lanes = 2 * static_cast<std::int64_t>(hn::Lanes(du32));  // bf16 elements a vector
  std::int64_t tail;
  if (inv_scale == 1.0f) {
    tail = for_each_vector(n, lanes, [&](std::int64_t i) HWY_ATTR {
      const auto w = hn::LoadU(du32, reinterpret_cast<const std::uint32_t*>(p + i));
      track(w, hn::ShiftLeft<16>(w));
    });
  } else {
    tail = for_each_vector(n, lanes, [&](std::int64_t i) HWY_ATTR {
      auto* pw = reinterpret_cast<std::uint32_t*>(p + i);
      const auto w = hn::LoadU(du32, pw);
      const auto lo_bits = hn::ShiftLeft<16>(w);
      track(w, lo_bits);
      const auto lo = hn::Mul(hn::BitCast(df, lo_bits), inv);
      const auto hi = hn::Mul(hn::BitCast(df, hn::And(w, upper)), inv);
      const auto out = hn::Or(hn::ShiftRight<16>(bf16_in_upper_half(du32, lo)),
                              hn::And(bf16_in_upper_half(du32, hi), upper));
      hn::StoreU(out, du32, pw);
    });
  }
  bool found = any_at_least(di32, running, 0x7f800000);
  for (std::int64_t i = tail; i < n; ++i) {
    found |= bf16_bits_nonfinite(p[i]);
    if (inv_scale != 1.0f) p[i] = float_to_bf16_bits(bf16_bits_to_float(p[i]) * inv_scale);
  }
  return found;
}

bool UnscaleViews(const TensorView* views, std::size_t count, float inv_scale) {
  bool found = false;
  for (std::size_t v = 0; v < count; ++v) {
    const TensorView& view = views[v];
    switch (view.dtype) {
      case DType::kFloat32:
        found |= unscale_wide<float, std::int32_t, 0x7fffffff, 0x7f800000>(
            static_cast<float*>(view.data), view.numel, inv_scale);
        break;
      case DType::kFloat64:
        found |= unscale_wide<double, std::int64_t, 0x7fffffffffffffffll, 0x7ff0000000000000ll>(
            static_cast<double*>(view.data), view.numel, static_cast<double>(inv_scale));
        break;
      case DType::kFloat16:
        found |= unscale_half(static_cast<std::uint16_t*>(view.data), view.numel, inv_scale);
        break;
      case DType::kBFloat16:
        found |= unscale_bf16(static_cast<std::uint16_t*>(view.data), view.numel, inv_scale);
        break;
    }
  }
  return found;
}

// The target this copy was compiled for, so tests can see which one the dispatcher picked.
std::int64_t CompiledTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(UnscaleViews);
HWY_EXPORT(CompiledTarget);

bool unscale_views(const TensorView* views, std::size_t count, float inv_scale) {
  return HWY_DYNAMIC_DISPATCH(UnscaleViews)(views, count, inv_scale);
}

std::vector<std::int64_t> simd_targets() { return hwy::SupportedAndGeneratedTargets(); }

const char* simd_target_name(std::int64_t target) { return hwy::TargetName(target); }

void force_simd_target(std::int64_t target) { hwy::SetSupportedTargetsForTest(target); }

std::int64_t dispatched_simd_target() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
