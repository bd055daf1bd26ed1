// Gradient clipping kernels of the core: the total norm (with the inf check of unscale_ in the
// same read) and the multiply that unscales and clips in one read-write pass. Framework-free:
// mixprec::clip_grad_norm_ and GradScaler::clip_grad_norm_ (include/mixprec/clip.h,
// grad_scaler.h) are adapters over these functions; the fused optimizers take the clip
// coefficient in their own pass (optim_kernels.h).
#pragma once

#include <cstddef>

#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// The norms grad_norm_ accumulates; other p are the adapters' slow path.
enum class NormKind {
  kTwo,  ///< out = sum of u^2 (the square of the 2-norm)
  kInf,  ///< out = max |u| (the inf-norm), NaN when any u is NaN
};

/// One read of every element of every view: u = element * inv_scale, computed as
/// GradScaler::unscale_() computes it (in float; fp16/bf16 rounded back to their type, fp64 in
/// double), and
/// - `*out` = the sum of u^2 (kTwo), or max |u| (kInf), in double. Squares of float values are
///   exact in double; the sum is taken in a fixed order (fixed pieces of each view, summed in
///   order, then the views in order), so the result does not depend on the thread count. NaN
///   propagates; inf gives inf.
/// - `*found_inf` (may be null) is set to 1.0 when any element *as stored* (before the multiply)
///   is inf or NaN, exactly as non_finite_check_and_unscale_ would set it; it is never cleared.
/// - `per_view` (may be null): `count` doubles, each view's own sum or max, for diagnostics.
/// Nothing is written to the views. `inv_scale` may be null (1). An empty list gives 0. All
/// views and pointers on one device; CUDA: `stream` as in kernels.h, `out` and `per_view` device
/// memory, and nothing waits for the host.
///
/// **Example**
/// ```cpp
/// double sum_sq = 0.0;
/// float found_inf = 0.0f, inv_scale = 1.0f / 1024.0f;
/// mixprec::core::grad_norm_(views.data(), views.size(), mixprec::core::NormKind::kTwo,
///                           &inv_scale, &sum_sq, &found_inf);
/// const double norm = std::sqrt(sum_sq);
/// ```
void grad_norm_(const TensorView* grads, std::size_t count, NormKind kind, const float* inv_scale,
                double* out, float* found_inf, double* per_view = nullptr, void* stream = nullptr);

/// Writes every element back as PyTorch's `unscale_` then `clip_grads_with_norm_` leave it:
/// g = fl(fl(g * inv_scale) * coef), with fp16/bf16 computed in float and rounded to their type
/// after each multiply (unscale_ stores the unscaled gradient), fp64 in double. `inv_scale` may
/// be null (1: no first multiply, as clip_grads_with_norm_ alone). `coef` is one float (the
/// clamped coefficient), read on the views' device. The multiply by coef always runs, also when
/// coef is 1, as in PyTorch (no host read of coef).
void unscale_and_clip_(const TensorView* grads, std::size_t count, const float* inv_scale,
                       const float* coef, void* stream = nullptr);

}  // namespace mixprec::core
