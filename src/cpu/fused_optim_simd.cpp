// CPU fused optimizers, the SIMD part: the SGD and Adam(W) element math of src/core/element_ops.h
// on whole vectors, one copy per Highway target (foreach_target.h), picked at run time by
// HWY_DYNAMIC_DISPATCH. Each call walks one span of one parameter on the calling thread; the
// driver in fused_optim.cpp splits the work across threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fused_optim_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cstdint>

#include "cpu/fused_optim_simd.h"
#include "cpu/simd_convert-inl.h"
#include "mixprec/core/half.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

// Note [SIMD optimizer math is the scalar math]
// Every vector operation below is one IEEE operation (Mul, Add, Div, Sqrt: each correctly
// rounded), in the order of the element ops of src/core/element_ops.h, which the CUDA kernels
// run. So each lane computes bit for bit what the scalar code computes, on every target:
// CMakeLists.txt builds the core with -ffp-contract=off, or GCC would fuse a Mul and an Add into
// one FMA on targets that have it, and results would depend on the CPU. fp16/bf16 parameters and
// state are widened to float exactly, computed in float, and rounded to nearest even once per
// store (Note [16-bit conversions in the SIMD kernels]); the math goes on with the unrounded float
// values, as PyTorch's fused CPU kernels do; a clipped gradient is the exception, rounded to its
// type before the step reads it, as PyTorch's step reads what clip_grads_with_norm_ stored. The
// remainder of a span that fills no whole vector runs the same body on one-lane vectors.

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// How a span's storage is read into and written from compute vectors (float or double lanes).
template <typename Storage, DType kType>
struct Io;

template <typename T, DType kType>
struct WideIo {  // float or double storage: the compute type itself
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const T* p) {
    return hn::LoadU(d, p);
  }
  template <class D>
  static HWY_INLINE void Store(D d, hn::Vec<D> v, T* p) {
    hn::StoreU(v, d, p);
  }
  template <class D>
  static HWY_INLINE hn::Vec<D> Round(D, hn::Vec<D> v) {  // to the storage and back
    return v;
  }
};
template <>
struct Io<float, DType::kFloat32> : WideIo<float, DType::kFloat32> {};
template <>
struct Io<double, DType::kFloat64> : WideIo<double, DType::kFloat64> {};

template <>
struct Io<std::uint16_t, DType::kFloat16> {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const std::uint16_t* p) {
    if constexpr (kHardwareF16) {
      const hn::Rebind<hwy::float16_t, D> dh;
      return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
    } else {
      const hn::RebindToUnsigned<D> du32;
      return half_to_float(d, hn::PromoteTo(du32, hn::LoadU(hn::Rebind<std::uint16_t, D>(), p)));
    }
  }
  template <class D>
  static HWY_INLINE void Store(D d, hn::Vec<D> v, std::uint16_t* p) {
    if constexpr (kHardwareF16) {
      const hn::Rebind<hwy::float16_t, D> dh;
      hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
    } else {
      const hn::RebindToSigned<D> di32;
      const hn::Rebind<std::uint16_t, D> du16;
      // The bits are < 2^16, so the saturating demotion is exact.
      hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, float_to_half(d, v))), du16, p);
    }
  }
  template <class D>
  static HWY_INLINE hn::Vec<D> Round(D d, hn::Vec<D> v) {
    if constexpr (kHardwareF16) {
      const hn::Rebind<hwy::float16_t, D> dh;
      return hn::PromoteTo(d, hn::DemoteTo(dh, v));
    } else {
      return half_to_float(d, float_to_half(d, v));
    }
  }
};

template <>
struct Io<std::uint16_t, DType::kBFloat16> {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const std::uint16_t* p) {
    const hn::RebindToUnsigned<D> du32;
    const auto bits = hn::PromoteTo(du32, hn::LoadU(hn::Rebind<std::uint16_t, D>(), p));
    return hn::BitCast(d, hn::ShiftLeft<16>(bits));  // exact
  }
  template <class D>
  static HWY_INLINE void Store(D d, hn::Vec<D> v, std::uint16_t* p) {
    const hn::RebindToUnsigned<D> du32;
    const hn::RebindToSigned<D> di32;
    const hn::Rebind<std::uint16_t, D> du16;
    const auto bits = hn::ShiftRight<16>(bf16_in_upper_half(du32, v));
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, bits)), du16, p);
  }
  template <class D>
  static HWY_INLINE hn::Vec<D> Round(D d, hn::Vec<D> v) {
    const hn::RebindToUnsigned<D> du32;
    return hn::BitCast(d, hn::And(bf16_in_upper_half(du32, v), hn::Set(du32, 0xffff0000u)));
  }
};

// Runs body(d, i) on whole vectors of D over [0, n), then on one-lane vectors over the rest.
template <class D, class Body>
HWY_INLINE void for_each_lane_group(D d, std::int64_t n, const Body& body) {
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) body(d, i);
  const hn::CappedTag<hn::TFromD<D>, 1> d1;
  for (; i < n; ++i) body(d1, i);
}

template <class IoT, typename S, typename T, bool kUnscale, bool kMomentum>
void sgd_span(const SgdSpan<S>& s, const SgdOp<T, true>& k) {
  for_each_lane_group(hn::ScalableTag<T>(), s.n, [&](auto d, std::int64_t i) HWY_ATTR {
    auto grad = IoT::Load(d, s.grad + i);
    if constexpr (kUnscale) {
      grad = hn::Mul(grad, hn::Set(d, k.inv_scale));
      if (k.clip) {  // Note [The fused clip is two multiplies] (element_ops.h)
        // The step then reads the stored clipped gradient, as after PyTorch's clip.
        grad = IoT::Round(d, hn::Mul(IoT::Round(d, grad), hn::Set(d, k.clip_coef)));
      }
      IoT::Store(d, grad, s.grad + i);
    }
    const auto param = IoT::Load(d, s.param + i);
    if (k.decay) grad = hn::Add(grad, hn::Mul(hn::Set(d, k.weight_decay), param));
    if constexpr (kMomentum) {
      const auto momentum = hn::Set(d, k.momentum);
      // LibTorch clones the first gradient into the buffer: no dampening then.
      const auto b = k.first ? grad
                             : hn::Add(hn::Mul(IoT::Load(d, s.buffer + i), momentum),
                                       hn::Mul(hn::Set(d, k.one_minus_dampening), grad));
      IoT::Store(d, b, s.buffer + i);
      grad = k.nesterov ? hn::Add(grad, hn::Mul(momentum, b)) : b;
    }
    IoT::Store(d, hn::Add(param, hn::Mul(hn::Set(d, k.neg_lr), grad)), s.param + i);
  });
}

template <class IoT, typename S, typename T, bool kUnscale, bool kAmsgrad>
void adam_span(const AdamSpan<S>& s, const AdamOp<T, false>& k) {
  for_each_lane_group(hn::ScalableTag<T>(), s.n, [&](auto d, std::int64_t i) HWY_ATTR {
    auto grad = IoT::Load(d, s.grad + i);
    if constexpr (kUnscale) {
      grad = hn::Mul(grad, hn::Set(d, k.inv_scale));
      if (k.clip) {  // Note [The fused clip is two multiplies] (element_ops.h)
        // The step then reads the stored clipped gradient, as after PyTorch's clip.
        grad = IoT::Round(d, hn::Mul(IoT::Round(d, grad), hn::Set(d, k.clip_coef)));
      }
      IoT::Store(d, grad, s.grad + i);
    }
    auto param = IoT::Load(d, s.param + i);
    if (k.l2) grad = hn::Add(grad, hn::Mul(hn::Set(d, k.weight_decay), param));
    const auto m = hn::Add(hn::Mul(IoT::Load(d, s.exp_avg + i), hn::Set(d, k.beta1)),
                           hn::Mul(hn::Set(d, k.one_minus_beta1), grad));
    IoT::Store(d, m, s.exp_avg + i);
    const auto v = hn::Add(hn::Mul(IoT::Load(d, s.exp_avg_sq + i), hn::Set(d, k.beta2)),
                           hn::Mul(hn::Mul(hn::Set(d, k.one_minus_beta2), grad), grad));
    IoT::Store(d, v, s.exp_avg_sq + i);
    auto root = v;
    if constexpr (kAmsgrad) {
      const auto old = IoT::Load(d, s.max_exp_avg_sq + i);
      root = hn::IfThenElse(hn::Or(hn::Gt(v, old), hn::IsNaN(v)), v, old);  // as torch::max_out
      IoT::Store(d, root, s.max_exp_avg_sq + i);
    }
    root = hn::Sqrt(root);
    if (k.decoupled) param = hn::Mul(param, hn::Set(d, k.decay));
    const auto denom = hn::Add(hn::Div(root, hn::Set(d, k.sqrt_bias_correction2)), hn::Set(d, k.eps));
    IoT::Store(d, hn::Add(param, hn::Mul(hn::Set(d, k.neg_step_size), hn::Div(m, denom))),
               s.param + i);
  });
}

// Picks the instantiation for the span's storage and the op's unscale and momentum/amsgrad flags.
template <typename S, typename T, DType kType>
void sgd_by_flags(const SgdSpan<S>& s, const SgdOp<T, true>& k, bool momentum) {
  using IoT = Io<S, kType>;
  if (k.unscale) {
    momentum ? sgd_span<IoT, S, T, true, true>(s, k) : sgd_span<IoT, S, T, true, false>(s, k);
  } else {
    momentum ? sgd_span<IoT, S, T, false, true>(s, k) : sgd_span<IoT, S, T, false, false>(s, k);
  }
}
template <typename S, typename T, DType kType>
void adam_by_flags(const AdamSpan<S>& s, const AdamOp<T, false>& k, bool amsgrad) {
  using IoT = Io<S, kType>;
  if (k.unscale) {
    amsgrad ? adam_span<IoT, S, T, true, true>(s, k) : adam_span<IoT, S, T, true, false>(s, k);
  } else {
    amsgrad ? adam_span<IoT, S, T, false, true>(s, k) : adam_span<IoT, S, T, false, false>(s, k);
  }
}

void SgdSpanFloat(const SgdSpan<float>& s, const SgdOp<float, true>& k, bool momentum) {
  sgd_by_flags<float, float, DType::kFloat32>(s, k, momentum);
}
void SgdSpanDouble(const SgdSpan<double>& s, const SgdOp<double, true>& k, bool momentum) {
  sgd_by_flags<double, double, DType::kFloat64>(s, k, momentum);
}
void SgdSpanHalf(const SgdSpan<std::uint16_t>& s, DType dtype, const SgdOp<float, true>& k,
                 bool momentum) {
  dtype == DType::kFloat16 ? sgd_by_flags<std::uint16_t, float, DType::kFloat16>(s, k, momentum)
                           : sgd_by_flags<std::uint16_t, float, DType::kBFloat16>(s, k, momentum);
}
void AdamSpanFloat(const AdamSpan<float>& s, const AdamOp<float, false>& k, bool amsgrad) {
  adam_by_flags<float, float, DType::kFloat32>(s, k, amsgrad);
}
void AdamSpanDouble(const AdamSpan<double>& s, const AdamOp<double, false>& k, bool amsgrad) {
  adam_by_flags<double, double, DType::kFloat64>(s, k, amsgrad);
}
void AdamSpanHalf(const AdamSpan<std::uint16_t>& s, DType dtype, const AdamOp<float, false>& k,
                  bool amsgrad) {
  dtype == DType::kFloat16
      ? adam_by_flags<std::uint16_t, float, DType::kFloat16>(s, k, amsgrad)
      : adam_by_flags<std::uint16_t, float, DType::kBFloat16>(s, k, amsgrad);
}

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(SgdSpanFloat);
HWY_EXPORT(SgdSpanDouble);
HWY_EXPORT(SgdSpanHalf);
HWY_EXPORT(AdamSpanFloat);
HWY_EXPORT(AdamSpanDouble);
HWY_EXPORT(AdamSpanHalf);

void sgd_span(const SgdSpan<float>& s, const SgdOp<float, true>& k, bool momentum) {
  HWY_DYNAMIC_DISPATCH(SgdSpanFloat)(s, k, momentum);
}
void sgd_span(const SgdSpan<double>& s, const SgdOp<double, true>& k, bool momentum) {
  HWY_DYNAMIC_DISPATCH(SgdSpanDouble)(s, k, momentum);
}
void sgd_span(const SgdSpan<std::uint16_t>& s, DType dtype, const SgdOp<float, true>& k,
              bool momentum) {
  HWY_DYNAMIC_DISPATCH(SgdSpanHalf)(s, dtype, k, momentum);
}
void adam_span(const AdamSpan<float>& s, const AdamOp<float, false>& k, bool amsgrad) {
  HWY_DYNAMIC_DISPATCH(AdamSpanFloat)(s, k, amsgrad);
}
void adam_span(const AdamSpan<double>& s, const AdamOp<double, false>& k, bool amsgrad) {
  HWY_DYNAMIC_DISPATCH(AdamSpanDouble)(s, k, amsgrad);
}
void adam_span(const AdamSpan<std::uint16_t>& s, DType dtype, const AdamOp<float, false>& k,
               bool amsgrad) {
  HWY_DYNAMIC_DISPATCH(AdamSpanHalf)(s, dtype, k, amsgrad);
}

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
