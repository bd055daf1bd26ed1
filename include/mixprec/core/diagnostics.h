// Overflow diagnostics of the core: counting inf and NaN in one view (CPU memory) and finding the
// first offending element. Used on overflow steps only, so it is a plain scalar loop.
#pragma once

#include <cstdint>

#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// What count_nonfinite() found in one view.
struct NonFiniteCount {
  std::int64_t inf_count = 0;
  std::int64_t nan_count = 0;
  std::int64_t first_index = -1;  ///< flat index of the first inf/NaN, -1 if none
  double first_value = 0.0;       ///< its value (inf, -inf or NaN)
};

/// Counts the +-inf and NaN elements of a CPU view (any dtype). Throws Error for CUDA views.
NonFiniteCount count_nonfinite(const TensorView& view);

}  // namespace mixprec::core
