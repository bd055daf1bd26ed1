// CPU clipping driver: cuts the views into fixed pieces, runs them on OpenMP threads, and combines
// the pieces' sums in order on the calling thread, so the norm does not depend on the thread
// count (Note [The clip norm is exact per element and summed in a fixed order], clip_simd.cpp).
#include "cpu/clip.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/threads.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

namespace mixprec::core::cpu {
namespace {

struct Piece {
  TensorView view;
  std::size_t owner;  // index of the view it belongs to
};

// Pieces of kTaskBytes (a fixed number of elements per dtype): their boundaries, and so the
// order of the sums, never depend on the thread count.
std::vector<Piece> cut(const TensorView* views, std::size_t count, std::int64_t* total_bytes) {
  std::vector<Piece> pieces;
  *total_bytes = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const TensorView& v = views[i];
    const auto size = static_cast<std::int64_t>(element_size(v.dtype));
    const std::int64_t per_piece = kTaskBytes / size;
    for (std::int64_t begin = 0; begin < v.numel; begin += per_piece) {
      const std::int64_t n = v.numel - begin < per_piece ? v.numel - begin : per_piece;
      pieces.push_back(
          {{static_cast<unsigned char*>(v.data) + begin * size, n, v.dtype, v.device}, i});
    }
    *total_bytes += v.numel * size;
  }
  return pieces;
}

// Runs body(k) for every piece k, on up to threads_for_bytes(bytes) threads. body must not throw.
template <typename Body>
void for_each_piece(std::int64_t pieces, std::int64_t bytes, const Body& body) {
  const int threads = threads_for_bytes(bytes);
#ifdef _OPENMP
  if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t k = 0; k < pieces; ++k) body(k);
    return;
  }
#else
  (void)threads;
#endif
  for (std::int64_t k = 0; k < pieces; ++k) body(k);
}

// max that keeps a NaN once one was seen (values are >= 0 or NaN).
double max_keep_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}

}  // namespace

void grad_norm(const TensorView* grads, std::size_t count, NormKind kind, float inv_scale,
               double* out, float* found_inf, double* per_view) {
  std::int64_t bytes = 0;
  const std::vector<Piece> pieces = cut(grads, count, &bytes);
  std::vector<NormPiece> results(pieces.size());
  for_each_piece(static_cast<std::int64_t>(pieces.size()), bytes, [&](std::int64_t k) {
    const auto i = static_cast<std::size_t>(k);
    results[i] = norm_of_piece(pieces[i].view, kind, inv_scale);
  });
  std::vector<double> views(count, 0.0);
  bool found = false;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    double& v = views[pieces[k].owner];
    v = kind == NormKind::kTwo ? v + results[k].value : max_keep_nan(v, results[k].value);
    found |= results[k].found;
  }
  double total = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    total = kind == NormKind::kTwo ? total + views[i] : max_keep_nan(total, views[i]);
    if (per_view != nullptr) per_view[i] = views[i];
  }
  *out = total;
  if (found && found_inf != nullptr) *found_inf = 1.0f;
}

void unscale_and_clip(const TensorView* grads, std::size_t count, float inv_scale, float coef) {
  std::int64_t bytes = 0;
  const std::vector<Piece> pieces = cut(grads, count, &bytes);
  for_each_piece(static_cast<std::int64_t>(pieces.size()), bytes, [&](std::int64_t k) {
    clip_piece(pieces[static_cast<std::size_t>(k)].view, inv_scale, coef);
  });
}

}  // namespace mixprec::core::cpu
