// CPU gradient clipping, the SIMD part: the norm with the inf check of one piece, and the
// unscale-and-clip multiply of one piece, one copy per Highway target (foreach_target.h), picked at
// run time by HWY_DYNAMIC_DISPATCH. The driver in clip.cpp cuts the views into fixed pieces and
// runs them on threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/clip_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/element_ops.h"
#include "cpu/clip.h"
#include "cpu/simd_convert-inl.h"
#include "mixprec/core/half.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

// Note [The clip norm is exact per element and summed in a fixed order]
// u = fl(g * inv_scale) is what unscale_ stores (fp16/bf16 rounded to their type); u is a float,
// so u^2 is exact in double, and only the sum rounds. Each piece (clip.cpp) sums its elements in
// double on four vector accumulators of the widest double vector, then its lanes; the pieces and
// views are added in order on one thread. The order thus depends on the piece size and the SIMD
// width of the CPU, never on the thread count. max |u| is kept as the largest bit pattern of |u|
// (for non-negative IEEE values the integer order is the numeric order, and every NaN lies above
// inf), so one NaN makes the inf-norm NaN, as PyTorch's. The inf check is done on the stored
// bits, before the multiply, as unscale_ does: an inv_scale > 1 may overflow a finite u to inf,
// which the norm then shows and found_inf does not.

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads one vector of the storage as floats (exact widening) into lanes of DF.
template <DType kType, class DF>
HWY_INLINE hn::Vec<DF> load_float(DF df, const void* p, std::int64_t i) {
  if constexpr (kType == DType::kFloat32) {
    return hn::LoadU(df, static_cast<const float*>(p) + i);
  } else {
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<std::uint16_t, DF> du16;
    const auto bits =
        hn::PromoteTo(du32, hn::LoadU(du16, static_cast<const std::uint16_t*>(p) + i));
    if constexpr (kType == DType::kFloat16) return half_to_float(df, bits);
    return hn::BitCast(df, hn::ShiftLeft<16>(bits));
  }
}

// Rounds floats to the storage type and widens them again (identity for float32).
template <DType kType, class DF>
HWY_INLINE hn::Vec<DF> round_to_storage(DF df, hn::Vec<DF> f) {
  if constexpr (kType == DType::kFloat32) {
    return f;
  } else if constexpr (kType == DType::kFloat16) {
    return half_to_float(df, float_to_half(df, f));
  } else {
    const hn::RebindToUnsigned<DF> du32;
    return hn::BitCast(df, hn::And(bf16_in_upper_half(du32, f), hn::Set(du32, 0xffff0000u)));
  }
}

template <DType kType, class DF>
HWY_INLINE void store_float(DF df, hn::Vec<DF> f, void* p, std::int64_t i) {
  if constexpr (kType == DType::kFloat32) {
    hn::StoreU(f, df, static_cast<float*>(p) + i);
  } else {
    const hn::RebindToUnsigned<DF> du32;
    const hn::RebindToSigned<DF> di32;
    const hn::Rebind<std::uint16_t, DF> du16;
    const auto bits = kType == DType::kFloat16 ? float_to_half(df, f)
                                               : hn::ShiftRight<16>(bf16_in_upper_half(du32, f));
    // The bits are < 2^16, so the saturating demotion is exact.
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, bits)), du16,
               static_cast<std::uint16_t*>(p) + i);
  }
}

// float32/fp16/bf16 storage: u in float, widened to double for the square.
template <DType kType, NormKind kKind>
NormPiece norm_narrow(const void* p, std::int64_t n, float inv) {
  using T = UnscaleType<kType>;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const hn::RebindToSigned<decltype(df)> di;
  const auto abs_mask = hn::Set(di, 0x7fffffff);
  const auto vinv = hn::Set(df, inv);
  const bool multiply = inv != 1.0f;
  auto stored = hn::Zero(di);
  auto umax = hn::Zero(di);
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(dd));
  const auto one = [&](std::int64_t i, hn::Vec<decltype(dd)>& acc) HWY_ATTR {
    const auto s = load_float<kType>(df, p, i);
    stored = hn::Max(stored, hn::And(hn::BitCast(di, s), abs_mask));
    auto u = s;
    if (multiply) u = round_to_storage<kType>(df, hn::Mul(s, vinv));
    if constexpr (kKind == NormKind::kTwo) {
      const auto w = hn::PromoteTo(dd, u);
      acc = hn::Add(acc, hn::Mul(w, w));
    } else {
      umax = hn::Max(umax, hn::And(hn::BitCast(di, u), abs_mask));
    }
  };
  std::int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    one(i, a0);
    one(i + lanes, a1);
    one(i + 2 * lanes, a2);
    one(i + 3 * lanes, a3);
  }
  for (; i + lanes <= n; i += lanes) one(i, a0);
  NormPiece out;
  out.found = !hn::AllFalse(di, hn::Gt(stored, hn::Set(di, 0x7f7fffff)));
  double sum = hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  std::int32_t max_bits = hn::GetLane(hn::MaxOfLanes(di, umax));
  for (; i < n; ++i) {  // the tail, element by element, in order
    const typename T::Storage e = static_cast<const typename T::Storage*>(p)[i];
    out.found |= T::nonfinite(e);
    float u = T::load(e);
    if (multiply) u = T::load(T::store(u * inv));
    if constexpr (kKind == NormKind::kTwo) {
      sum += static_cast<double>(u) * static_cast<double>(u);
    } else {
      std::int32_t bits;
      std::memcpy(&bits, &u, sizeof(bits));
      bits &= 0x7fffffff;
      if (bits > max_bits) max_bits = bits;
    }
  }
  if constexpr (kKind == NormKind::kTwo) {
    out.value = sum;
  } else {
    float m;
    std::memcpy(&m, &max_bits, sizeof(m));
    out.value = static_cast<double>(m);  // NaN stays NaN
  }
  return out;
}

template <NormKind kKind>
NormPiece norm_double(const double* p, std::int64_t n, double inv) {
  const hn::ScalableTag<double> dd;
  const hn::RebindToSigned<decltype(dd)> di;
  const auto abs_mask = hn::Set(di, 0x7fffffffffffffffll);
  const auto vinv = hn::Set(dd, inv);
  auto stored = hn::Zero(di);
  auto umax = hn::Zero(di);
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(dd));
  const auto one = [&](std::int64_t i, hn::Vec<decltype(dd)>& acc) HWY_ATTR {
    const auto s = hn::LoadU(dd, p + i);
    stored = hn::Max(stored, hn::And(hn::BitCast(di, s), abs_mask));
    const auto u = hn::Mul(s, vinv);
    if constexpr (kKind == NormKind::kTwo) {
      acc = hn::Add(acc, hn::Mul(u, u));
    } else {
      umax = hn::Max(umax, hn::And(hn::BitCast(di, u), abs_mask));
    }
  };
  std::int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    one(i, a0);
    one(i + lanes, a1);
    one(i + 2 * lanes, a2);
    one(i + 3 * lanes, a3);
  }
  for (; i + lanes <= n; i += lanes) one(i, a0);
  NormPiece out;
  out.found = !hn::AllFalse(di, hn::Gt(stored, hn::Set(di, 0x7fefffffffffffffll)));
  double sum = hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  std::int64_t max_bits = hn::GetLane(hn::MaxOfLanes(di, umax));
  for (; i < n; ++i) {
    out.found |= is_nonfinite(p[i]);
    const double u = p[i] * inv;
    if constexpr (kKind == NormKind::kTwo) {
      sum += u * u;
    } else {
      std::int64_t bits;
      std::memcpy(&bits, &u, sizeof(bits));
      bits &= 0x7fffffffffffffffll;
      if (bits > max_bits) max_bits = bits;
    }
  }
  if constexpr (kKind == NormKind::kTwo) {
    out.value = sum;
  } else {
    std::memcpy(&out.value, &max_bits, sizeof(out.value));
  }
  return out;
}

template <NormKind kKind>
NormPiece norm_by_dtype(const TensorView& v, float inv) {
  switch (v.dtype) {
    case DType::kFloat32:
      return norm_narrow<DType::kFloat32, kKind>(v.data, v.numel, inv);
    case DType::kFloat16:
      return norm_narrow<DType::kFloat16, kKind>(v.data, v.numel, inv);
    case DType::kBFloat16:
      return norm_narrow<DType::kBFloat16, kKind>(v.data, v.numel, inv);
    case DType::kFloat64:
      break;
  }
  return norm_double<kKind>(static_cast<const double*>(v.data), v.numel, static_cast<double>(inv));
}

NormPiece NormOfPiece(const TensorView& piece, NormKind kind, float inv_scale) {
  return kind == NormKind::kTwo ? norm_by_dtype<NormKind::kTwo>(piece, inv_scale)
                                : norm_by_dtype<NormKind::kInf>(piece, inv_scale);
}

// g = fl(fl(g * inv) * coef), rounded to the storage after each multiply.
template <DType kType>
void clip_narrow(void* p, std::int64_t n, float inv, float coef) {
  using T = UnscaleType<kType>;
  const hn::ScalableTag<float> df;
  const auto vinv = hn::Set(df, inv);
  const auto vcoef = hn::Set(df, coef);
  const bool multiply = inv != 1.0f;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    auto u = load_float<kType>(df, p, i);
    if (multiply) u = round_to_storage<kType>(df, hn::Mul(u, vinv));
    store_float<kType>(df, hn::Mul(u, vcoef), p, i);
  }
  auto* e = static_cast<typename T::Storage*>(p);
  for (; i < n; ++i) {
    float u = T::load(e[i]);
    if (multiply) u = T::load(T::store(u * inv));
    e[i] = T::store(u * coef);
  }
}

void clip_double(double* p, std::int64_t n, double inv, double coef) {
  const hn::ScalableTag<double> dd;
  const auto vinv = hn::Set(dd, inv);
  const auto vcoef = hn::Set(dd, coef);
  const bool multiply = inv != 1.0;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(dd));
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    auto u = hn::LoadU(dd, p + i);
    if (multiply) u = hn::Mul(u, vinv);
    hn::StoreU(hn::Mul(u, vcoef), dd, p + i);
  }
  for (; i < n; ++i) p[i] = (multiply ? p[i] * inv : p[i]) * coef;
}

void ClipPiece(const TensorView& piece, float inv_scale, float coef) {
  switch (piece.dtype) {
    case DType::kFloat32:
      return clip_narrow<DType::kFloat32>(piece.data, piece.numel, inv_scale, coef);
    case DType::kFloat16:
      return clip_narrow<DType::kFloat16>(piece.data, piece.numel, inv_scale, coef);
    case DType::kBFloat16:
      return clip_narrow<DType::kBFloat16>(piece.data, piece.numel, inv_scale, coef);
    case DType::kFloat64:
      return clip_double(static_cast<double*>(piece.data), piece.numel,
                         static_cast<double>(inv_scale), static_cast<double>(coef));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(NormOfPiece);
HWY_EXPORT(ClipPiece);

NormPiece norm_of_piece(const TensorView& piece, NormKind kind, float inv_scale) {
  return HWY_DYNAMIC_DISPATCH(NormOfPiece)(piece, kind, inv_scale);
}

void clip_piece(const TensorView& piece, float inv_scale, float coef) {
  HWY_DYNAMIC_DISPATCH(ClipPiece)(piece, inv_scale, coef);
}

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
