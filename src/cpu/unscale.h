// CPU backend of the unscale-and-check kernel (internal; called only from src/core/kernels.cpp).
#pragma once

#include <cstddef>

#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

/// The CPU kernel behind core::non_finite_check_and_unscale_; arguments already validated.
void non_finite_check_and_unscale(const TensorView* grads, std::size_t count, float* found_inf,
                                  float inv_scale);

}  // namespace mixprec::core::cpu
