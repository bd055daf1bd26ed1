// quantize_fp8_tiles_ / dequantize_fp8_tiles_ (torchao's rowwise scaling, TE's Float8BlockScaling
// 1x128 and 128x128 tiles) against a reference written here from the published rules, not from
// mixprec/core/fp8.h: TE's compute_scale_from_amax (common/recipe/recipe_common.cuh: amax below
// eps counts as eps; 0, inf or NaN gives 1; fp8_max / amax, FLT_MAX where infinite; mantissa
// cleared for power-of-two scales) and torchao's amax_to_scale (float64 division stored as
// float32, exp2(floor(log2)) rounding, eps 1e-12), per tile of ragged shapes (sizes not
// multiples of the tile), every input dtype, every compiled SIMD target, 1 to 3 threads.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/fp8_reference.h"
#include "mixprec/core/error.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {
namespace {

namespace ref = fp8_reference;
using ref::for_each_backend;
using ref::ThreadCount;
using ref::Typed;

// TE's compute_scale_from_amax, written out (float32 arithmetic, as the CUDA code).
float te_scale(float amax, float fp8_max, bool pow2, float eps) {
  if (amax < eps) amax = eps;
  if (std::isinf(amax) || amax == 0.0f || std::isnan(amax)) return 1.0f;
  float scale = fp8_max / amax;
  if (std::isinf(scale)) scale = FLT_MAX;
  if (pow2) scale = std::exp2(std::floor(std::log2(static_cast<double>(scale))));
  return scale;
}

struct Shape {
  std::int64_t rows, cols, tile_rows, tile_cols;
  bool alike = false;  // tiles share their column's amax, but for a few (see tile_values)
};

// The tiles of the recipes, on shapes with ragged edges.
const Shape kShapes[] = {
    {5, 300, 1, 128},      // TE 1x128: 3 tiles a row, the last 44 wide
    {130, 200, 128, 128},  // TE 128x128: a bottom row of 2-row tiles, a right column 72 wide
    {7, 96, 1, 96},        // torchao rowwise: one scale per row
    {3, 1, 1, 1},          // one element a tile
    {1, 5000, 1, 5000},    // one long row
    {260, 70, 128, 128},   // narrower than a tile
    // No ragged edges: 1x128 with 18 tiles a row (more than one vector of tiles for reduce_tiles
    // in src/cpu/fp8_tiles_simd.cpp), rowwise, and 64x128 tiles with a bottom row of 2-row tiles.
    {6, 2304, 1, 128},
    {4, 256, 1, 256},
    {66, 256, 64, 128},
    // Scales alike down the columns, so that bands are cast with the scales of the band above
    // (Note [Tile guesses]), until a tile holding NaN, inf, zeros, subnormals or larger values.
    {98, 20, 4, 8, true},
};

// x: spread magnitudes per tile, a zero tile, a tiny tile (its scale overflows), specials.
std::vector<double> tile_values(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<std::size_t>(s.rows * s.cols));
  const std::int64_t per_row = (s.cols + s.tile_cols - 1) / s.tile_cols;
  for (std::int64_t r = 0; r < s.rows; ++r) {
    for (std::int64_t c = 0; c < s.cols; ++c) {
      const std::int64_t tile = r / s.tile_rows * per_row + c / s.tile_cols;
      if (s.alike) {
        // |x| < 1.5 * 2^m but for the first element of each tile, 1.9 * 2^m (m by column), so that
        // the scales repeat; each 11th tile a NaN, -inf, zeros, subnormals or 16 times larger.
        const double m = std::exp2(static_cast<double>(c / s.tile_cols * 5 % 9) - 4.0);
        double x = r % s.tile_rows == 0 && c % s.tile_cols == 0
                       ? -1.9 * m
                       : std::max(-1.5, std::min(1.5, normal(rng))) * m;
        if (tile % 11 == 10) {
          switch (tile / 11 % 5) {
            case 0:
              x = c % 3 == 1 ? std::nan("") : x;
              break;
            case 1:
              x = c % 3 == 1 ? -std::numeric_limits<double>::infinity() : x;
              break;
            case 2:
              x = 0.0;
              break;
            case 3:
              x = x * 1e-40;
              break;
            default:
              x = x * 16.0;
          }
        }
        v[static_cast<std::size_t>(r * s.cols + c)] = x;
        continue;
      }
      const double scale = std::exp2(static_cast<double>(tile * 7 % 61) - 30.0);
      v[static_cast<std::size_t>(r * s.cols + c)] = tile % 5 == 3    ? 0.0
                                                    : tile % 11 == 4 ? 1e-40
                                                                     : normal(rng) * scale;
      if (tile % 13 == 6 && c % 17 == 1) v[static_cast<std::size_t>(r * s.cols + c)] = std::nan("");
      if (tile % 19 == 9 && c % 23 == 2) {
        v[static_cast<std::size_t>(r * s.cols + c)] = -std::numeric_limits<double>::infinity();
      }
    }
  }
  return v;
}

TEST(Fp8TilesTest, EveryTileHasTransformerEnginesScaleAndItsElementsTheirCasts) {
  for (const Shape& s : kShapes) {
    const std::vector<double> values = tile_values(s, static_cast<unsigned>(s.cols));
    const std::int64_t per_row = (s.cols + s.tile_cols - 1) / s.tile_cols;
    const std::int64_t tiles = (s.rows + s.tile_rows - 1) / s.tile_rows * per_row;
    for (DType dtype : ref::kDTypes) {
      Typed x(dtype, s.rows * s.cols);
      for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, values[static_cast<std::size_t>(i)]);
      for (Fp8Format f : ref::kFormats) {
        const float fmax = f == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
        for (const bool pow2 : {true, false}) {
          for (const NanAmax nan : {NanAmax::kIgnore, NanAmax::kPropagate}) {
            for (const float eps : {0.0f, 1e-12f}) {
              CurrentScaling rule;
              rule.power_of_2_scales = pow2;
              rule.nan = nan;
              rule.eps = eps;
              // The reference, tile by tile.
              std::vector<float> want_inv(static_cast<std::size_t>(tiles));
              std::vector<std::uint8_t> want_q(static_cast<std::size_t>(x.numel()));
              for (std::int64_t t = 0; t < tiles; ++t) {
                const std::int64_t r0 = t / per_row * s.tile_rows, c0 = t % per_row * s.tile_cols;
                float amax = 0.0f;
                bool has_nan = false;
                for (std::int64_t r = r0; r < std::min(s.rows, r0 + s.tile_rows); ++r) {
                  for (std::int64_t c = c0; c < std::min(s.cols, c0 + s.tile_cols); ++c) {
                    const float a = std::fabs(x.as_float(r * s.cols + c));
                    has_nan = has_nan || std::isnan(a);
                    if (!std::isnan(a)) amax = std::max(amax, a);
                  }
                }
                const float scale =
                    te_scale(has_nan && nan == NanAmax::kPropagate ? NAN : amax, fmax, pow2, eps);
                want_inv[static_cast<std::size_t>(t)] = 1.0f / scale;
                for (std::int64_t r = r0; r < std::min(s.rows, r0 + s.tile_rows); ++r) {
                  for (std::int64_t c = c0; c < std::min(s.cols, c0 + s.tile_cols); ++c) {
                    want_q[static_cast<std::size_t>(r * s.cols + c)] =
                        ref::quantize(x.as_float(r * s.cols + c) * scale, f);
                  }
                }
              }
              for_each_backend([&](const std::string& backend) {
                for (int threads : {1, 3}) {
                  const ThreadCount scoped(threads);
                  const std::string what =
                      backend + " " + dtype_name(dtype) + " " + fp8_format_name(f) + " " +
                      std::to_string(s.rows) + "x" + std::to_string(s.cols) + " tiles " +
                      std::to_string(s.tile_rows) + "x" + std::to_string(s.tile_cols) +
                      (pow2 ? " pow2" : "") + (nan == NanAmax::kIgnore ? " kIgnore" : "") +
                      " eps " + std::to_string(eps) + " threads " + std::to_string(threads);
                  std::vector<std::uint8_t> q(want_q.size() + 8, 0x5a);
                  std::vector<float> inv(want_inv.size() + 2, -1.0f);
                  quantize_fp8_tiles_(x.view(), s.cols, s.tile_rows, s.tile_cols, q.data(),
                                      inv.data(), f, rule);
                  for (std::size_t t = 0; t < want_inv.size(); ++t) {
                    ASSERT_EQ(ref::bits32(inv[t]), ref::bits32(want_inv[t]))
                        << what << ": tile " << t << " scale_inv " << inv[t] << ", want "
                        << want_inv[t];
                  }
                  EXPECT_EQ(inv[want_inv.size()], -1.0f) << what << ": wrote past scale_inv";
                  for (std::size_t i = 0; i < want_q.size(); ++i) {
                    ASSERT_EQ(q[i], want_q[i]) << what << ": element " << i << " ("
                                               << x.value(static_cast<std::int64_t>(i)) << ")";
                  }
                  EXPECT_EQ(q[want_q.size()], 0x5a) << what << ": wrote past q";
                  // Dequantize: code times its tile's scale_inv, rounded to the dtype.
                  Typed out(dtype, x.numel());
                  dequantize_fp8_tiles_(q.data(), inv.data(), s.cols, s.tile_rows, s.tile_cols, f,
                                        out.view());
                  for (std::int64_t i = 0; i < x.numel(); i += 7) {
                    const std::int64_t t =
                        i / s.cols / s.tile_rows * per_row + i % s.cols / s.tile_cols;
                    Typed one(dtype, 1);
                    one.set(0, static_cast<double>(
                                   fp8_bits_to_float(q[static_cast<std::size_t>(i)], f) *
                                   inv[static_cast<std::size_t>(t)]));
                    const double got = out.value(i), want = one.value(0);
                    if (std::isnan(want)) {
                      ASSERT_TRUE(std::isnan(got)) << what << ": dequantized " << i;
                    } else {
                      ASSERT_EQ(got, want) << what << ": dequantized " << i;
                    }
                  }
                }
              });
            }
          }
        }
      }
    }
  }
}

// torchao's amax_to_scale, written out: float64 fp8_max / max(amax, 1e-12) stored as float32,
// then exp2(floor(log2)) for power-of-two scales. It agrees with the rule above on every tile a
// float32 amax gives, except that torchao's log2 is rounded in float32 (see fp8_anchors.py): the
// exact floor is what mixprec computes.
TEST(Fp8TilesTest, RowwiseScalesAreTorchaosAmaxToScale) {
  const Shape s{64, 48, 1, 48};
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  Typed x(DType::kFloat32, s.rows * s.cols);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.set(i, normal(rng) * std::exp2(static_cast<double>(i / s.cols % 40) - 20.0));
  }
  CurrentScaling rule;  // eps 1e-12, kIgnore (no NaN here)
  for (const bool pow2 : {false, true}) {
    rule.power_of_2_scales = pow2;
    std::vector<std::uint8_t> q(static_cast<std::size_t>(x.numel()));
    std::vector<float> inv(static_cast<std::size_t>(s.rows));
    quantize_fp8_tiles_(x.view(), s.cols, 1, s.cols, q.data(), inv.data(), Fp8Format::kE4M3, rule);
    for (std::int64_t r = 0; r < s.rows; ++r) {
      double amax = 0.0;
      for (std::int64_t c = 0; c < s.cols; ++c)
        amax = std::max(amax, std::fabs(x.value(r * s.cols + c)));
      auto scale = static_cast<float>(448.0 / std::max(amax, 1e-12));
      if (pow2)
        scale = static_cast<float>(std::exp2(std::floor(std::log2(static_cast<double>(scale)))));
      EXPECT_EQ(inv[static_cast<std::size_t>(r)], 1.0f / scale) << "row " << r << " pow2 " << pow2;
    }
  }
}

TEST(Fp8TilesTest, ArgumentsAreChecked) {
  Typed x(DType::kFloat32, 10);
  std::vector<std::uint8_t> q(10);
  std::vector<float> inv(10);
  const CurrentScaling rule;
  const auto message = [](const auto& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([&] {
              quantize_fp8_tiles_(x.view(), 3, 1, 1, q.data(), inv.data(), Fp8Format::kE4M3, rule);
            }).find("quantize_fp8_tiles_: x has 10 elements, not a multiple of cols = 3"),
            std::string::npos);
  EXPECT_NE(message([&] {
              quantize_fp8_tiles_(x.view(), 5, 0, 4, q.data(), inv.data(), Fp8Format::kE4M3, rule);
            }).find("quantize_fp8_tiles_: tiles must be at least 1 x 1, got 0 x 4"),
            std::string::npos);
  EXPECT_NE(message([&] {
              quantize_fp8_tiles_(x.view(), 5, 1, 4, q.data(), nullptr, Fp8Format::kE4M3, rule);
            }).find("quantize_fp8_tiles_: scale_inv is null"),
            std::string::npos);
  EXPECT_NE(message([&] {
              dequantize_fp8_tiles_(q.data(), inv.data(), 0, 1, 4, Fp8Format::kE4M3, x.view());
            }).find("dequantize_fp8_tiles_: cols must be > 0"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::core
