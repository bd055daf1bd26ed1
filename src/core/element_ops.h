// The per-element operations of the kernels (internal), as host/device code: the CUDA kernels
// (src/cuda/) run them on the device; the CPU fused optimizers (src/cpu/fused_optim.cpp) take
// their coefficients from the same make_*_op functions, so one place derives the optimizer
// scalars; and tests/cuda/element_ops_test.cpp runs the CUDA element code on the host against the
// scalar reference and the CPU kernels, so it is tested without a GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "mixprec/core/clip_kernels.h"
#include "mixprec/core/half.h"
#include "mixprec/core/macros.h"
#include "mixprec/core/optim_kernels.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// How unscale-and-check reads, computes and writes one element of each dtype.
template <DType kType>
struct UnscaleType;
template <>
struct UnscaleType<DType::kFloat32> {
  using Storage = float;
  using Compute = float;
  MIXPREC_HOST_DEVICE static float load(float v) { return v; }
  MIXPREC_HOST_DEVICE static float store(float v) { return v; }
  MIXPREC_HOST_DEVICE static bool nonfinite(float v) { return is_nonfinite(v); }
};
template <>
struct UnscaleType<DType::kFloat64> {
  using Storage = double;
  using Compute = double;
  MIXPREC_HOST_DEVICE static double load(double v) { return v; }
  MIXPREC_HOST_DEVICE static double store(double v) { return v; }
  MIXPREC_HOST_DEVICE static bool nonfinite(double v) { return is_nonfinite(v); }
};
template <>
struct UnscaleType<DType::kFloat16> {
  using Storage = std::uint16_t;
  using Compute = float;
  MIXPREC_HOST_DEVICE static float load(std::uint16_t v) { return half_bits_to_float(v); }
  MIXPREC_HOST_DEVICE static std::uint16_t store(float v) { return float_to_half_bits(v); }
  MIXPREC_HOST_DEVICE static bool nonfinite(std::uint16_t v) { return half_bits_nonfinite(v); }
};
template <>
struct UnscaleType<DType::kBFloat16> {
  using Storage = std::uint16_t;
  using Compute = float;
  MIXPREC_HOST_DEVICE static float load(std::uint16_t v) { return bf16_bits_to_float(v); }
  MIXPREC_HOST_DEVICE static std::uint16_t store(float v) { return float_to_bf16_bits(v); }
  MIXPREC_HOST_DEVICE static bool nonfinite(std::uint16_t v) { return bf16_bits_nonfinite(v); }
};

/// One unscale-and-check element: note a non-finite value as stored, then, when `write`,
/// multiply by `inv` in the compute type and store rounded to nearest even.
template <DType kType>
struct UnscaleOp {
  using T = UnscaleType<kType>;
  static constexpr int kDepth = 1;
  typename T::Compute inv;
  bool write;
  bool found = false;

  MIXPREC_HOST_DEVICE void operator()(typename T::Storage (&e)[1]) {
    found |= T::nonfinite(e[0]);
    if (write) e[0] = T::store(T::load(e[0]) * inv);
  }
};

/// The unscale op for inverse scale `inv` (nothing is written when it is 1).
template <DType kType>
MIXPREC_HOST_DEVICE UnscaleOp<kType> make_unscale_op(float inv) {
  using Compute = typename UnscaleType<kType>::Compute;
  return {static_cast<Compute>(inv), inv != 1.0f};
}

/// One element of the clip norm (core::grad_norm_, run by the CUDA kernel): note a non-finite
/// value as stored, take u = the element times `inv` as unscale_ stores it, and add u^2 in double
/// (kTwo, exact for float u) or keep the largest |u| (kInf; NaN sticks). Each thread keeps its own
/// op; the kernel combines them in a fixed order.
template <DType kType, NormKind kKind>
struct NormOp {
  using T = UnscaleType<kType>;
  static constexpr int kDepth = 1;
  typename T::Compute inv;
  bool multiply;
  double value = 0.0;
  bool found = false;

  MIXPREC_HOST_DEVICE void operator()(typename T::Storage (&e)[1]) {
    found |= T::nonfinite(e[0]);
    typename T::Compute u = T::load(e[0]);
    if (multiply) u = T::load(T::store(u * inv));
    const double w = static_cast<double>(u);
    if constexpr (kKind == NormKind::kTwo) {
      value = value + w * w;
    } else {
      value = max_keep_nan(value, w < 0 ? -w : w);
    }
  }

  /// max of two norms that keeps a NaN (values are >= 0 or NaN).
  MIXPREC_HOST_DEVICE static double max_keep_nan(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  }
};

/// The norm op for inverse scale `inv` (1: no multiply).
template <DType kType, NormKind kKind>
MIXPREC_HOST_DEVICE NormOp<kType, kKind> make_norm_op(float inv) {
  using Compute = typename UnscaleType<kType>::Compute;
  return {static_cast<Compute>(inv), inv != 1.0f};
}

/// One element of core::unscale_and_clip_ (run by the CUDA kernel): g = fl(fl(g * inv) * coef),
/// rounded to the storage after each multiply (Note [The fused clip is two multiplies]).
template <DType kType>
struct ClipOp {
  using T = UnscaleType<kType>;
  static constexpr int kDepth = 1;
  typename T::Compute inv, coef;
  bool multiply;

  MIXPREC_HOST_DEVICE void operator()(typename T::Storage (&e)[1]) const {
    typename T::Compute u = T::load(e[0]);
    if (multiply) u = T::load(T::store(u * inv));
    e[0] = T::store(u * coef);
  }
};

/// The clip op for inverse scale `inv` (1: no first multiply) and coefficient `coef`.
template <DType kType>
MIXPREC_HOST_DEVICE ClipOp<kType> make_clip_op(float inv, float coef) {
  using Compute = typename UnscaleType<kType>::Compute;
  return {static_cast<Compute>(inv), static_cast<Compute>(coef), inv != 1.0f};
}

// Note [CUDA fused kernels compute as the CPU ones]
// The per-element expressions below are those of src/cpu/fused_optim.cpp, in the same order and
// in the parameter's type, and CMakeLists.txt builds the CUDA sources with --fmad=false so that
// nvcc does not contract a * b + c into one FMA (the CPU build has no FMA either). SGD is then
// bit-identical to the CPU kernel; Adam's bias corrections come from the device's pow(), which
// may differ from glibc's in the last bit, so on a GPU Adam agrees to rounding (tests/cuda).

/// True when the step is skipped: found_inf is set (any non-zero value, NaN included).
MIXPREC_HOST_DEVICE inline bool skip_step(const float* found_inf) {
  return found_inf != nullptr && *found_inf != 0.0f;
}

/// The inverse GradScaler::unscale_() uses (Note [Fused unscale multiplies by the inverse] in
/// src/cpu/fused_optim.cpp); 1 without a grad_scale.
MIXPREC_HOST_DEVICE inline float inverse_scale(const float* grad_scale) {
  return grad_scale == nullptr ? 1.0f : static_cast<float>(1.0 / static_cast<double>(*grad_scale));
}

/// The clip coefficient of a fused step: *clip_coef, or 1 (no clip) when it is null.
MIXPREC_HOST_DEVICE inline float clip_coefficient(const float* clip_coef) {
  return clip_coef == nullptr ? 1.0f : *clip_coef;
}

// Note [The fused clip is two multiplies]
// With a clip coefficient, the gradient becomes fl(fl(g * inv_scale) * coef): PyTorch's unscale_
// then clip_grads_with_norm_, rounding for rounding, for any scale (one multiply by
// inv_scale * coef would differ from it in about a quarter of the elements when the scale is not
// a power of two). The result is written back to the gradient, as PyTorch leaves it. fp16/bf16
// storage (CPU only) rounds to its type between the two, as unscale_ stores it.

/// One SGD element: e = {param, grad[, momentum_buffer]}. Its scalars are the CPU kernel's too.
template <typename T, bool kMomentum>
struct SgdOp {
  static constexpr int kDepth = kMomentum ? 3 : 2;
  T inv_scale, weight_decay, momentum, one_minus_dampening, neg_lr, clip_coef;
  bool unscale, decay, first, nesterov, clip;

  MIXPREC_HOST_DEVICE void operator()(T (&e)[kDepth]) const {
    T d = e[1];
    if (unscale) {
      d = d * inv_scale;
      if (clip) d = d * clip_coef;  // Note [The fused clip is two multiplies]
      e[1] = d;
    }
    const T param = e[0];
    if (decay) d = d + weight_decay * param;
    if constexpr (kMomentum) {
      // LibTorch clones the first gradient into the buffer: no dampening then.
      const T b = first ? d : e[2] * momentum + one_minus_dampening * d;
      e[2] = b;
      d = nesterov ? d + momentum * b : b;
    }
    e[0] = param + neg_lr * d;
  }
};

/// The SGD element op for inverse scale `inv` and a parameter whose applied-step count is
/// `count` (null: no count; 0: the momentum buffer is still empty); `clip_coef` (may be null)
/// is the clip coefficient.
template <typename T, bool kMomentum>
MIXPREC_HOST_DEVICE SgdOp<T, kMomentum> make_sgd_op(const SgdHyper& h, float inv,
                                                    const std::int64_t* count,
                                                    const float* clip_coef = nullptr) {
  const bool clip = clip_coef != nullptr;
  return {static_cast<T>(inv),
          static_cast<T>(h.weight_decay),
          static_cast<T>(h.momentum),
          static_cast<T>(1.0 - h.dampening),
          static_cast<T>(-1.0 * h.lr),
          static_cast<T>(clip_coefficient(clip_coef)),
          inv != 1.0f || clip,
          h.weight_decay != 0.0,
          count != nullptr && *count == 0,
          h.nesterov,
          clip};
}

/// One Adam element: e = {param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq]}. Its scalars
/// are the CPU kernel's too.
template <typename T, bool kAmsgrad>
struct AdamOp {
  static constexpr int kDepth = kAmsgrad ? 5 : 4;
  T inv_scale, weight_decay, decay, beta1, one_minus_beta1, beta2, one_minus_beta2;
  T neg_step_size, sqrt_bias_correction2, eps, clip_coef;
  bool unscale, l2, decoupled, clip;

  MIXPREC_HOST_DEVICE void operator()(T (&e)[kDepth]) const {
    using std::sqrt;
    T grad = e[1];
    if (unscale) {
      grad = grad * inv_scale;
      if (clip) grad = grad * clip_coef;  // Note [The fused clip is two multiplies]
      e[1] = grad;
    }
    if (l2) grad = grad + weight_decay * e[0];
    e[2] = e[2] * beta1 + one_minus_beta1 * grad;
    const T v = e[3] * beta2 + one_minus_beta2 * grad * grad;
    e[3] = v;
    T root = v;
    if constexpr (kAmsgrad) {
      const T old = e[4];
      root = (v > old || v != v) ? v : old;  // NaN-propagating, as torch::max_out
      e[4] = root;
    }
    root = sqrt(root);
    T param = e[0];
    if (decoupled) param = param * decay;
    const T denom = root / sqrt_bias_correction2 + eps;
    e[0] = param + neg_step_size * (e[2] / denom);
  }
};

/// The Adam(W) element op for inverse scale `inv` at step `step` (counting from 1); the bias
/// corrections in double, as LibTorch. `clip_coef` (may be null) is the clip coefficient.
template <typename T, bool kAmsgrad>
MIXPREC_HOST_DEVICE AdamOp<T, kAmsgrad> make_adam_op(const AdamHyper& h, float inv,
                                                     std::int64_t step,
                                                     const float* clip_coef = nullptr) {
  using std::pow;
  using std::sqrt;
  const double bc1 = 1.0 - pow(h.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - pow(h.beta2, static_cast<double>(step));
  const bool has_decay = h.weight_decay != 0.0;
  const bool decoupled = h.decoupled_weight_decay;
  return {static_cast<T>(inv),
          static_cast<T>(h.weight_decay),
          static_cast<T>(1.0 - h.lr * h.weight_decay),
          static_cast<T>(h.beta1),
          static_cast<T>(1.0 - h.beta1),
          static_cast<T>(h.beta2),
          static_cast<T>(1.0 - h.beta2),
          static_cast<T>(-(h.lr / bc1)),
          static_cast<T>(sqrt(bc2)),
          static_cast<T>(h.eps),
          static_cast<T>(clip_coefficient(clip_coef)),
          inv != 1.0f || clip_coef != nullptr,
          has_decay && !decoupled,
          has_decay && decoupled,
          clip_coef != nullptr};
}

}  // namespace mixprec::core
