// The CUDA FP8 tile kernels' per-thread code (src/cuda/fp8_elements.cuh: tile_span,
// tile_amax_share, tile_scale, tile_quantize_share, tile_dequantize_element) run on the host, as
// quantize_tiles_kernel's blocks run it (a block per tile, grid-stride over the tiles; its 256
// threads' shares reduced to the tile's amax; thread 0's scale) and dequantize_tiles_kernel's
// grid-stride threads, against mixprec's CPU kernels (quantize_fp8_tiles_ / dequantize_fp8_tiles_
// on CPU views) bit for bit, NaNs included: rowwise, 1 x 128 and 128 x 128 tiles with ragged edges,
// every dtype and format, both NaN rules, power-of-two scales. No GPU needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/fp8_elements.cuh"
#include "cuda/fp8_test_util.h"
#include "mixprec/core/fp8.h"

namespace mixprec::core::cuda {
namespace {

constexpr int kBlockThreads = 256;  // fp8.cu's kFp8Threads

struct TileShape {
  std::int64_t rows, cols, tile_rows, tile_cols;
};

// quantize_tiles_kernel with `grid` blocks of kBlockThreads threads: q and scale_inv.
template <DType kType, Fp8Format kFormat>
void emulate_quantize_tiles(Tensor& x, const TileShape& s, const CurrentScaling& rule,
                            std::int64_t grid, std::uint8_t* q, float* scale_inv) {
  const auto* data = static_cast<const typename Fp8Io<kType>::Storage*>(x.data());
  const std::int64_t tiles =
      (s.rows + s.tile_rows - 1) / s.tile_rows * ((s.cols + s.tile_cols - 1) / s.tile_cols);
  const bool skip_nan = rule.nan == NanAmax::kIgnore;
  for (std::int64_t block = 0; block < grid; ++block) {
    for (std::int64_t t = block; t < tiles; t += grid) {
      const TileSpan span = tile_span(t, s.rows, s.cols, s.tile_rows, s.tile_cols);
      std::uint32_t bits = 0;  // block_max over the threads' shares
      for (int thread = 0; thread < kBlockThreads; ++thread) {
        bits = max_bits(
            bits, tile_amax_share<kType>(data, s.cols, span, thread, kBlockThreads, skip_nan));
      }
      const float scale = tile_scale<kFormat>(bits, rule);  // thread 0, shared
      scale_inv[t] = 1.0f / scale;
      for (int thread = 0; thread < kBlockThreads; ++thread) {
        tile_quantize_share<kType, kFormat>(data, s.cols, span, scale, q, thread, kBlockThreads);
      }
    }
  }
}

// dequantize_tiles_kernel's `threads` grid-stride threads.
template <DType kType, Fp8Format kFormat>
void emulate_dequantize_tiles(const std::uint8_t* q, const float* scale_inv, const TileShape& s,
                              std::int64_t threads, typename Fp8Io<kType>::Storage* out) {
  const std::int64_t n = s.rows * s.cols, per_row = (s.cols + s.tile_cols - 1) / s.tile_cols;
  for (std::int64_t t = 0; t < threads; ++t) {
    for (std::int64_t i = t; i < n; i += threads) {
      out[i] = tile_dequantize_element<kType, kFormat>(q, scale_inv, i, s.cols, s.tile_rows,
                                                       s.tile_cols, per_row);
    }
  }
}

template <DType kType, Fp8Format kFormat>
void check_tiles(const TileShape& s, std::mt19937_64& rng) {
  using Storage = typename Fp8Io<kType>::Storage;
  const std::int64_t n = s.rows * s.cols;
  const std::int64_t tiles =
      (s.rows + s.tile_rows - 1) / s.tile_rows * ((s.cols + s.tile_cols - 1) / s.tile_cols);
  Tensor x = random_tensor(kType, n, rng, /*specials=*/true);
  // A tile of zeros and a tile of NaNs only (where there are that many tiles): amax 0, and NaN or
  // 0 by the NaN rule.
  for (std::int64_t k = 1; k <= 2 && k < tiles; ++k) {
    const TileSpan span = tile_span(k, s.rows, s.cols, s.tile_rows, s.tile_cols);
    for (std::int64_t e = 0; e < span.h * span.w; ++e) {
      const std::int64_t i = tile_element(span, s.cols, e);
      const std::uint64_t nan = kType == DType::kFloat64   ? 0x7ff8000000000000ull
                                : kType == DType::kFloat32 ? 0x7fc00000u
                                : kType == DType::kFloat16 ? 0x7e00u
                                                           : 0x7fc0u;
      const std::uint64_t bits = k == 1 ? 0 : nan;
      std::memcpy(x.bytes.data() + i * element_size(kType), &bits, element_size(kType));
    }
  }
  const TensorView view{x.data(), n, kType};
  for (NanAmax nan : {NanAmax::kIgnore, NanAmax::kPropagate}) {
    for (bool pow2 : {false, true}) {
      CurrentScaling rule;
      rule.nan = nan;
      rule.power_of_2_scales = pow2;
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(kType) << " " << fp8_format_name(kFormat) << " " << s.rows << "x"
                   << s.cols << " tiles " << s.tile_rows << "x" << s.tile_cols << " nan "
                   << (nan == NanAmax::kIgnore ? "ignore" : "propagate") << " pow2 " << pow2);
      std::vector<std::uint8_t> q_cpu(static_cast<std::size_t>(n));
      std::vector<float> inv_cpu(static_cast<std::size_t>(tiles));
      quantize_fp8_tiles_(view, s.cols, s.tile_rows, s.tile_cols, q_cpu.data(), inv_cpu.data(),
                          kFormat, rule);
      // The launch's grid (every tile its block, at most 1024) and grids that wrap.
      for (std::int64_t grid :
           {tiles < 1024 ? tiles : std::int64_t{1024}, std::int64_t{1}, std::int64_t{3}}) {
        for (std::uint8_t sentinel : {0x00, 0xff}) {  // an element left unwritten shows in one
          std::vector<std::uint8_t> q(q_cpu.size(), sentinel);
          std::vector<float> inv(inv_cpu.size(), -1.0f);
          emulate_quantize_tiles<kType, kFormat>(x, s, rule, grid, q.data(), inv.data());
          for (std::int64_t t = 0; t < tiles; ++t) {
            ASSERT_EQ(bits32(inv[static_cast<std::size_t>(t)]),
                      bits32(inv_cpu[static_cast<std::size_t>(t)]))
                << "scale_inv of tile " << t << ", grid " << grid;
          }
          for (std::int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(q[static_cast<std::size_t>(i)], q_cpu[static_cast<std::size_t>(i)])
                << "element " << i << ", grid " << grid;
          }
        }
      }
      // Dequantize the CPU's codes (and every code: q_cpu's first 256 replaced) with its scales.
      for (int c = 0; c < 256 && c < n; ++c)
        q_cpu[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(c);
      std::vector<Storage> out_cpu(static_cast<std::size_t>(n));
      dequantize_fp8_tiles_(q_cpu.data(), inv_cpu.data(), s.cols, s.tile_rows, s.tile_cols, kFormat,
                            {out_cpu.data(), n, kType});
      for (std::int64_t threads : {std::int64_t{7}, std::int64_t{1024} * kBlockThreads}) {
        std::vector<Storage> out(out_cpu.size());
        std::memset(out.data(), 0xaa, out.size() * sizeof(Storage));
        emulate_dequantize_tiles<kType, kFormat>(q_cpu.data(), inv_cpu.data(), s, threads,
                                                 out.data());
        ASSERT_EQ(std::memcmp(out.data(), out_cpu.data(), out.size() * sizeof(Storage)), 0)
            << "dequantize, threads " << threads;
      }
    }
  }
}

// The recipes' tiles on shapes with ragged edges (as tests/core/fp8_tiles_test.cpp), and tiles
// that are single elements or whole tensors.
TEST(Fp8TilesElementTest, EmulatedTileKernelsGiveTheCpuKernelsBitsNanIncluded) {
  std::mt19937_64 rng(61);
  const TileShape shapes[] = {{7, 300, 1, 300},   {5, 300, 1, 128}, {130, 200, 128, 128},
                              {64, 256, 64, 128}, {3, 5, 1, 1},     {9, 33, 9, 33}};
  for (const TileShape& s : shapes) {
    check_tiles<DType::kFloat32, Fp8Format::kE4M3>(s, rng);
    check_tiles<DType::kFloat32, Fp8Format::kE5M2>(s, rng);
    check_tiles<DType::kFloat64, Fp8Format::kE4M3>(s, rng);
    check_tiles<DType::kFloat64, Fp8Format::kE5M2>(s, rng);
    check_tiles<DType::kFloat16, Fp8Format::kE4M3>(s, rng);
    check_tiles<DType::kFloat16, Fp8Format::kE5M2>(s, rng);
    check_tiles<DType::kBFloat16, Fp8Format::kE4M3>(s, rng);
    check_tiles<DType::kBFloat16, Fp8Format::kE5M2>(s, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// tile_span cuts the tensor into its tiles (row-major, ragged at the edges) and tile_element walks
// each tile's elements: every element in exactly one tile, the one dequantize looks up.
TEST(Fp8TilesElementTest, TileSpansCoverEveryElementOnceInTheTileDequantizeLooksUp) {
  const TileShape shapes[] = {
      {7, 300, 1, 300}, {5, 300, 1, 128}, {130, 200, 128, 128}, {3, 5, 2, 2}};
  for (const TileShape& s : shapes) {
    const std::int64_t per_row = (s.cols + s.tile_cols - 1) / s.tile_cols;
    const std::int64_t tiles = (s.rows + s.tile_rows - 1) / s.tile_rows * per_row;
    std::vector<std::int64_t> tile_of(static_cast<std::size_t>(s.rows * s.cols), -1);
    for (std::int64_t t = 0; t < tiles; ++t) {
      const TileSpan span = tile_span(t, s.rows, s.cols, s.tile_rows, s.tile_cols);
      ASSERT_GE(span.h, 1);
      ASSERT_GE(span.w, 1);
      for (std::int64_t e = 0; e < span.h * span.w; ++e) {
        auto& slot = tile_of[static_cast<std::size_t>(tile_element(span, s.cols, e))];
        ASSERT_EQ(slot, -1) << "element in two tiles";
        slot = t;
      }
    }
    // tile_dequantize_element's lookup: scale_inv[t] = t + 1, every code 0x38 (E4M3 1.0).
    std::vector<float> inv(static_cast<std::size_t>(tiles));
    for (std::int64_t t = 0; t < tiles; ++t)
      inv[static_cast<std::size_t>(t)] = static_cast<float>(t + 1);
    const std::vector<std::uint8_t> q(tile_of.size(), 0x38);
    for (std::size_t i = 0; i < tile_of.size(); ++i) {
      ASSERT_NE(tile_of[i], -1) << "element in no tile";
      const float v = tile_dequantize_element<DType::kFloat32, Fp8Format::kE4M3>(
          q.data(), inv.data(), static_cast<std::int64_t>(i), s.cols, s.tile_rows, s.tile_cols,
          per_row);
      EXPECT_EQ(v, static_cast<float>(tile_of[i] + 1)) << i;
    }
  }
}

}  // namespace
}  // namespace mixprec::core::cuda
