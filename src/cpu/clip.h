// CPU backend of the clipping kernels (internal; called only from src/core/kernels_clip.cpp,
// which validates the arguments). clip.cpp is the driver (pieces and threads); clip_simd.cpp the
// per-piece SIMD work, one copy per Highway target.
#pragma once

#include <cstddef>

#include "mixprec/core/clip_kernels.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

/// What one piece gives: its sum of u^2 or max |u| (NaN when a u is NaN), and whether an element
/// as stored was inf or NaN.
struct NormPiece {
  double value = 0.0;
  bool found = false;
};

/// The norm of one piece on the calling thread (Note [The clip norm is exact per element and
/// summed in a fixed order] in clip_simd.cpp).
NormPiece norm_of_piece(const TensorView& piece, NormKind kind, float inv_scale);

/// g = fl(fl(g * inv_scale) * coef) over one piece on the calling thread.
void clip_piece(const TensorView& piece, float inv_scale, float coef);

/// core::grad_norm_ on the CPU: *out, *found_inf (may be null) and per_view (may be null).
void grad_norm(const TensorView* grads, std::size_t count, NormKind kind, float inv_scale,
               double* out, float* found_inf, double* per_view);

/// core::unscale_and_clip_ on the CPU.
void unscale_and_clip(const TensorView* grads, std::size_t count, float inv_scale, float coef);

}  // namespace mixprec::core::cpu
