// Internal to mixprec's LibTorch part: the FP4 casts of the 4-bit recipes (fp8::Linear under
// Scaling::kNvfp4), beyond the deterministic ops of api.md (src/torch/fp8/fp4.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

#include "mixprec/core/fp4.h"
#include "mixprec/fp4.h"

namespace mixprec::fp4::detail {

/// quantize_nvfp4 with every core option: 2D tiles, and stochastic rounding with a Philox seed
/// and counter offset (core::Nvfp4Options). The same checks and errors as quantize_nvfp4. When
/// `reduce_amax` is set it gets the per-tensor amax (a [1] float32 tensor) before the cast and
/// may change it in place: the recipe's cross-rank reduction (Recipe::set_amax_reduction).
Nvfp4Tensor quantize_nvfp4(const at::Tensor& x, const core::Nvfp4Options& rule,
                           const std::function<void(at::Tensor&)>& reduce_amax = {});

/// TE's random Hadamard transform (core::hadamard16_) over each run of 16 along x's last
/// dimension (a multiple of 16): a bfloat16 tensor of x's shape. x: float32, bfloat16 or float16.
at::Tensor hadamard16(const at::Tensor& x);

}  // namespace mixprec::fp4::detail
