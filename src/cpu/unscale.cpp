// CPU unscale-and-check: the scalar, obviously-correct version of the kernel.
// The SIMD/multithreaded version replaces the body of non_finite_check_and_unscale() and must
// keep passing tests/core/unscale_conformance_test.cpp unchanged.
#include "cpu/unscale.h"

#include <cstdint>

#include "mixprec/core/half.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

namespace mixprec::core::cpu {
namespace {

// Returns whether any element was non-finite. `Load` widens a stored element to the compute type,
// `Store` rounds it back, `NonFinite` tests the stored bits.
template <typename Storage, typename Compute, typename Load, typename Store, typename NonFinite>
bool unscale_span(Storage* data, std::int64_t n, Compute inv_scale, Load load, Store store,
                  NonFinite nonfinite) {
  bool found = false;
  if (inv_scale == Compute(1)) {
    for (std::int64_t i = 0; i < n; ++i) found |= nonfinite(data[i]);
    return found;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    found |= nonfinite(data[i]);
    data[i] = store(load(data[i]) * inv_scale);
  }
  return found;
}

bool unscale_view(const TensorView& view, float inv_scale) {
  const auto identity = [](auto v) { return v; };
  switch (view.dtype) {
    case DType::kFloat32:
      return unscale_span(static_cast<float*>(view.data), view.numel, inv_scale, identity,
                          identity, [](float v) { return is_nonfinite(v); });
    case DType::kFloat64:
      return unscale_span(static_cast<double*>(view.data), view.numel,
                          static_cast<double>(inv_scale), identity, identity,
                          [](double v) { return is_nonfinite(v); });
    case DType::kFloat16:
      return unscale_span(static_cast<std::uint16_t*>(view.data), view.numel, inv_scale,
                          half_bits_to_float, float_to_half_bits, half_bits_nonfinite);
    case DType::kBFloat16:
      return unscale_span(static_cast<std::uint16_t*>(view.data), view.numel, inv_scale,
                          bf16_bits_to_float, float_to_bf16_bits, bf16_bits_nonfinite);
  }
  return false;
}

}  // namespace

void non_finite_check_and_unscale(const TensorView* grads, std::size_t count, float* found_inf,
                                  float inv_scale) {
  bool found = false;
  for (std::size_t i = 0; i < count; ++i) found |= unscale_view(grads[i], inv_scale);
  if (found) *found_inf = 1.0f;
}

}  // namespace mixprec::core::cpu
