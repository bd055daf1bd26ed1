// CPU FP8 kernels: cut the tensor into pieces (whole MX blocks for MXFP8), run them on OpenMP
// threads, and combine the workers' amaxes after the join. The per-element SIMD work is in
// fp8_simd.cpp, fp8_mx_simd.cpp and fp8_tiles_simd.cpp; every element is computed the same way
// whichever thread or target takes it.
#include "cpu/fp8.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/fp8_ops.h"  // max_nan
#include "cpu/fp8_simd.h"
#include "cpu/threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

namespace mixprec::core::cpu {
namespace {

// The elements [begin, begin + n) of `view`.
TensorView slice(const TensorView& view, std::int64_t begin, std::int64_t n) {
  const auto size = static_cast<std::int64_t>(element_size(view.dtype));
  return {static_cast<unsigned char*>(view.data) + begin * size, n, view.dtype, view.device};
}

// Calls piece(begin, end) over the `count` units [0, count), in pieces of `per_piece` units, on
// up to `threads` threads; returns the NaN-propagating max of what the calls return (0 if none).
// piece must not throw.
template <typename Piece>
float parallel_pieces(std::int64_t count, std::int64_t per_piece, int threads, const Piece& piece) {
  const std::int64_t pieces = (count + per_piece - 1) / per_piece;
  float amax = 0.0f;
#ifdef _OPENMP
  if (threads > 1 && pieces > 1) {
    std::vector<float> local(static_cast<std::size_t>(threads), 0.0f);
#pragma omp parallel num_threads(threads)
    {
      float mine = 0.0f;  // this worker's amax: no shared writes inside the loop
#pragma omp for schedule(static) nowait
      for (std::int64_t p = 0; p < pieces; ++p) {
        const std::int64_t begin = p * per_piece;
        mine = max_nan(mine, piece(begin, std::min(count, begin + per_piece)));
      }
      local[static_cast<std::size_t>(omp_get_thread_num())] = mine;
    }
    for (float a : local) amax = max_nan(amax, a);
    return amax;
  }
#else
  (void)threads;
#endif
  return count > 0 ? piece(0, count) : amax;
}

// Elements of x (or out when dequantizing) in one piece: kTaskBytes, a multiple of every SIMD
// width. The pieces go out in contiguous runs (OpenMP's static schedule), with the sizes of the
// unscale kernel (cpu/threads.h; Note [Chunking across tensors] in unscale.cpp).
std::int64_t per_piece(DType dtype) {
  return kTaskBytes / static_cast<std::int64_t>(element_size(dtype));
}

std::int64_t bytes_of(const TensorView& view) {
  return view.numel * static_cast<std::int64_t>(element_size(view.dtype));
}

// *amax = max(*amax, found), NaN-propagating.
void record_amax(float* amax, float found) { *amax = max_nan(*amax, found); }

}  // namespace

void amax(const TensorView& x, float* amax, NanAmax nan) {
  const float found = parallel_pieces(x.numel, per_piece(x.dtype), threads_for_bytes(bytes_of(x)),
                                      [&](std::int64_t begin, std::int64_t end) {
                                        return amax_span(slice(x, begin, end - begin), nan);
                                      });
  record_amax(amax, found);
}

void quantize_fp8(const TensorView& x, std::uint8_t* q, Fp8Format format, float scale,
                  float* amax, NanAmax nan) {
  const bool want_amax = amax != nullptr;
  const float found = parallel_pieces(
      x.numel, per_piece(x.dtype), threads_for_bytes(bytes_of(x)),
      [&](std::int64_t begin, std::int64_t end) {
        return quantize_span(slice(x, begin, end - begin), q + begin, format, scale, want_amax,
                             nan);
      });
  if (want_amax) record_amax(amax, found);
}

void dequantize_fp8(const std::uint8_t* q, Fp8Format format, float scale_inv,
                    const TensorView& out) {
  parallel_pieces(out.numel, per_piece(out.dtype), threads_for_bytes(bytes_of(out)),
                  [&](std::int64_t begin, std::int64_t end) {
                    dequantize_span(q + begin, format, scale_inv, slice(out, begin, end - begin));
                    return 0.0f;
                  });
}

// MXFP8: pieces of whole blocks (ceil(cols / 32) a row, numbered row by row), about kTaskBytes.
void quantize_mxfp8(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                    Fp8Format format, NanAmax nan) {
  if (x.numel == 0) return;
  const std::int64_t blocks = x.numel / cols * ((cols + 31) / 32);
  parallel_pieces(blocks, std::max<std::int64_t>(1, per_piece(x.dtype) / 32),
                  threads_for_bytes(bytes_of(x)), [&](std::int64_t first, std::int64_t last) {
                    quantize_mx_blocks(x, cols, q, scales, format, nan, first, last);
                    return 0.0f;
                  });
}

void dequantize_mxfp8(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                      Fp8Format format, const TensorView& out) {
  if (out.numel == 0) return;
  const std::int64_t blocks = out.numel / cols * ((cols + 31) / 32);
  parallel_pieces(blocks, std::max<std::int64_t>(1, per_piece(out.dtype) / 32),
                  threads_for_bytes(bytes_of(out)), [&](std::int64_t first, std::int64_t last) {
                    dequantize_mx_blocks(q, scales, cols, format, out, first, last);
                    return 0.0f;
                  });
}

// Tiles: pieces of whole tiles, about kTaskBytes each.
namespace {
std::int64_t tile_count(std::int64_t numel, std::int64_t cols, std::int64_t th, std::int64_t tc) {
  const std::int64_t rows = numel / cols;
  return (rows + th - 1) / th * ((cols + tc - 1) / tc);
}
}  // namespace

void quantize_fp8_tiles(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                        std::int64_t tile_cols, std::uint8_t* q, float* scale_inv,
                        Fp8Format format, const CurrentScaling& rule) {
  if (x.numel == 0) return;
  // One run of whole bands (the rows of one row of tiles) a thread, no shorter than kTaskBytes:
  // the kernel pipelines its reads across a run's bands (Note [Tile casts] in fp8_tiles_simd.cpp).
  const std::int64_t rows = x.numel / cols;
  const std::int64_t bands = (rows + tile_rows - 1) / tile_rows;
  const int threads = std::max(threads_for_bytes(bytes_of(x)), 1);  // 0 for a small x
  const std::int64_t per_thread = (bands + threads - 1) / threads;
  const std::int64_t band = std::min(tile_rows, rows) * cols;
  parallel_pieces(bands, std::max({std::int64_t{1}, per_piece(x.dtype) / band, per_thread}),
                  threads, [&](std::int64_t first, std::int64_t last) {
                    quantize_tiles(x, cols, tile_rows, tile_cols, q, scale_inv, format, rule,
                                   first, last);
                    return 0.0f;
                  });
}

void dequantize_fp8_tiles(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                          std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                          const TensorView& out) {
  if (out.numel == 0) return;
  const std::int64_t tile = std::min(tile_rows, out.numel / cols) * std::min(tile_cols, cols);
  parallel_pieces(tile_count(out.numel, cols, tile_rows, tile_cols),
                  std::max<std::int64_t>(1, per_piece(out.dtype) / tile),
                  threads_for_bytes(bytes_of(out)), [&](std::int64_t first, std::int64_t last) {
                    dequantize_tiles(q, scale_inv, cols, tile_rows, tile_cols, format, out, first,
                                     last);
                    return 0.0f;
                  });
}

}  // namespace mixprec::core::cpu
