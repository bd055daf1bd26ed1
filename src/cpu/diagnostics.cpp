// count_nonfinite(): the scalar scan behind GradScaler's opt-in overflow diagnostics.
#include "mixprec/core/diagnostics.h"

#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/core/half.h"

namespace mixprec::core {
namespace {

template <typename Storage, typename Widen>
NonFiniteCount scan(const Storage* data, std::int64_t n, Widen widen) {
  NonFiniteCount c;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = widen(data[i]);
    const bool nan = std::isnan(v);
    if (!nan && !std::isinf(v)) continue;
    ++(nan ? c.nan_count : c.inf_count);
    if (c.first_index < 0) {
      c.first_index = i;
      c.first_value = v;
    }
  }
  return c;
}

}  // namespace

NonFiniteCount count_nonfinite(const TensorView& view) {
  MIXPREC_CHECK(view.device.type == DeviceType::kCPU,
                "count_nonfinite: takes CPU memory; copy device buffers to the host first");
  MIXPREC_CHECK(view.data != nullptr || view.numel == 0, "count_nonfinite: null data");
  switch (view.dtype) {
    case DType::kFloat32:
      return scan(static_cast<const float*>(view.data), view.numel,
                  [](float v) { return static_cast<double>(v); });
    case DType::kFloat64:
      return scan(static_cast<const double*>(view.data), view.numel, [](double v) { return v; });
    case DType::kFloat16:
      return scan(static_cast<const std::uint16_t*>(view.data), view.numel,
                  [](std::uint16_t v) { return static_cast<double>(half_bits_to_float(v)); });
    case DType::kBFloat16:
      return scan(static_cast<const std::uint16_t*>(view.data), view.numel,
                  [](std::uint16_t v) { return static_cast<double>(bf16_bits_to_float(v)); });
  }
  return {};
}

}  // namespace mixprec::core
