// CPU backend of the fused optimizer kernels (internal; called only from src/core/kernels.cpp,
// which has validated the arguments and handled found_inf).
#pragma once

#include <cstddef>

#include "mixprec/core/optim_kernels.h"

namespace mixprec::core::cpu {

/// The SGD update of core::fused_sgd_ with gradients multiplied by `inv_scale` (1: untouched),
/// then by *clip_coef when it is not null (a host pointer).
void fused_sgd(const SgdTensors* params, std::size_t count, const SgdHyper& hyper, float inv_scale,
               const float* clip_coef);

/// The Adam(W) update of core::fused_adam_, likewise.
void fused_adam(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                float inv_scale, const float* clip_coef);

}  // namespace mixprec::core::cpu
