// CPU FP8 kernels, tiles (rowwise, 1 x 128, 128 x 128: one current-scaling scale each), per
// Highway target as fp8_simd.cpp's spans; the shared loops are fp8_loops-inl.h's.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fp8_tiles_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/aligned_allocator.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "cpu/fp8_loops-inl.h"
#include "cpu/fp8_simd.h"

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Codes of the elements [c, c + n) by to_fp8_scaled() (0 < scale < inf, no NaN among them), and
// in the same loop the amax bits of [a, a + n) into the vector at amax (their lanewise maximum,
// with the vector there if `accumulate`): see Note [Tile casts].
template <Fp8Format kFormat, class Src>
HWY_INLINE void codes_and_amax(const Src& src, std::int64_t c, std::int64_t a, std::int64_t n,
                               std::uint8_t* HWY_RESTRICT q, float scale,
                               std::int32_t* HWY_RESTRICT amax, bool accumulate) {
  using DF = typename Src::DF;
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto abs_mask = hn::Set(du, 0x7fffffffu);
  const auto vscale = hn::Set(df, scale);
  auto running = accumulate ? hn::Load(di, amax) : hn::Zero(di);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  const auto step = [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
    const auto y = hn::BitCast(du, src.Load(df, a + i));
    running = hn::Max(running, hn::BitCast(di, hn::And(y, abs_mask)));
    const auto x = hn::BitCast(du, src.Load(df, c + i));
    return to_fp8_scaled<kFormat>(df, x, vscale);
  };
  std::int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    prefetch_ahead(src, a + i, 4 * lanes);  // See Note [FP8 casts prefetch]
    const auto c0 = step(i), c1 = step(i + lanes);
    const auto c2 = step(i + 2 * lanes), c3 = step(i + 3 * lanes);
    store_codes4(df, c0, c1, c2, c3, q + c + i);
  }
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, step(i))), d8, q + c + i);
  }
  if (i < n) {
    std::uint32_t bits = 0;
    for (; i < n; ++i) {
      bits = std::max(bits, float_to_bits(src.At(a + i)) & 0x7fffffffu);
      q[c + i] = float_to_fp8_bits(src.At(c + i) * scale, kFormat);
    }
    running = hn::Max(running, hn::Set(di, static_cast<std::int32_t>(bits)));
  }
  hn::Store(running, di, amax);
}

// codes_and_amax() for each tile k of a row whose elements start at c, its partner's at a:
// scale[k], the amax vector at amax + k * Lanes. Out of line, with a loop of its own over the
// tiles: inlined in quantize_tiles' lambdas, the tile loop kept its counters on the stack.
template <Fp8Format kFormat, class Src>
HWY_NOINLINE void codes_and_amax_row(const Src& src, std::int64_t c, std::int64_t a,
                                     std::int64_t cols, std::int64_t tc,
                                     std::uint8_t* HWY_RESTRICT q, const float* HWY_RESTRICT scale,
                                     std::int32_t* HWY_RESTRICT amax, bool accumulate) {
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(typename Src::DF()));
  for (std::int64_t j = 0; j < cols; j += tc, ++scale, amax += lanes) {
    codes_and_amax<kFormat>(src, c + j, a + j, std::min(tc, cols - j), q, *scale, amax, accumulate);
  }
}

// bits[k] = the largest of the lanes at amax + k * Lanes(di), for k < count; overwrites amax.
// Returns whether some tile's bits are NaN's. The vectors of each group of Lanes(di) tiles are
// reduced together: each step folds the lane pairs of two vectors into one, halving their number,
// until one vector holds the group's maxima in order (a fraction of one MaxOfLanes a tile).
template <class DI>
HWY_INLINE bool reduce_tiles(DI di, std::int32_t* HWY_RESTRICT amax, std::size_t count,
                             std::uint32_t* HWY_RESTRICT bits) {
  const std::size_t lanes = hn::Lanes(di);
  auto top = hn::Zero(di);  // the groups' lanewise maximum
  for (std::size_t g = 0; g < count; g += lanes) {
    std::int32_t* HWY_RESTRICT v = amax + g * lanes;
    const std::size_t live = std::min(lanes, count - g);  // the group's tiles
#if HWY_TARGET != HWY_SCALAR
    for (std::size_t n = lanes, m = live; n > 1; n /= 2, m = (m + 1) / 2) {
      // Vectors m .. n - 1 would hold tiles past count: taken as 0, not read.
      for (std::size_t i = 0; 2 * i < m; ++i) {
        const auto lo = hn::Load(di, v + 2 * i * lanes);
        const auto hi = 2 * i + 1 < m ? hn::Load(di, v + (2 * i + 1) * lanes) : hn::Zero(di);
        hn::Store(hn::Max(hn::ConcatOdd(di, hi, lo), hn::ConcatEven(di, hi, lo)), di,
                  v + i * lanes);
      }
    }
#endif
    const auto maxima = hn::Load(di, v);  // lanes past live: 0
    top = hn::Max(top, maxima);
    if (live == lanes) {
      hn::StoreU(hn::BitCast(hn::RebindToUnsigned<DI>(), maxima), hn::RebindToUnsigned<DI>(),
                 bits + g);
    } else {
      for (std::size_t k = 0; k < live; ++k) bits[g + k] = static_cast<std::uint32_t>(v[k]);
    }
  }
  return !hn::AllFalse(di, hn::Lt(hn::Set(di, 0x7f800000), top));
}

// The scales of `count` tiles of these amax bits and their inverses. Out of line, the compiler
// vectorizes the loop (current_scale's branches become selects); inlined, it did not.
HWY_NOINLINE void tile_scales(const std::uint32_t* HWY_RESTRICT bits, std::size_t count,
                              float fp8_max, const CurrentScaling& rule,
                              float* HWY_RESTRICT scale, float* HWY_RESTRICT scale_inv) {
  const CurrentScaling r = rule;  // not aliased by the stores
  for (std::size_t k = 0; k < count; ++k) {
    const float s = current_scale(amax_of_bits(bits[k]), fp8_max, r);
    scale[k] = s;
    scale_inv[k] = 1.0f / s;
  }
}

// Note [Tile casts]
// A tile's scale needs its amax before its first code, so a tile cast reads its input twice.
// Tiles are walked a band at a time (the tile_rows rows of one row of tiles), and the two reads
// are pipelined across bands: one loop writes the codes of band b, read again from cache (a row
// of 1 x 128 or rowwise tiles from L1 or L2, a 128-row band of 4096 columns from L3), and takes
// the amax of band b + 1, streamed from memory, its row r + tile_rows beside row r. The memory
// reads then overlap the conversions instead of waiting for a pass of their own. 64M fp32 in
// rows of 4096, 2 threads (bench/fp8_benchmark, medians of 8 interleaved runs, 3 runs each,
// ms; the 4:1 loop took 6.8-9.2 ms in the same runs):
//                                    rowwise    1 x 128    128 x 128
//   an amax pass, then a codes pass  12.2-13.0  12.9-13.3  12.0-12.1
//   pipelined (this)                  9.0-9.7   10.3-10.9   8.2-8.9
// Tried and dropped (one run each): pipelining groups of bands of about 64 KiB to 1 MiB (no
// change), prefetching the codes' reads too (slower), streaming stores (no steady gain), and
// re-reading a band's columns in L2-sized groups (128 x 128 slower). Visiting a 128 x 128 tile
// alone reads 128 short rows 16 KiB apart: 0.39x the loop. On another VM (docs/performance.md,
// 2026-12-06): casting each 1 x 128 tile alone, amax then codes from L1, ran at 0.82-0.85x the
// loop against 0.92-1.01x pipelined; an amax vector a tile, reduced once a band, and prefetching
// the codes' reads showed no gain.
// Per-tile work (2026-12-07, the 300 MiB-L3 VM): a 1 x 128 tile's MaxOfLanes, its two scalar
// divisions and the branches around them cost about half its conversions' time (one thread, 1M:
// 0.414 ms; 0.293 ms with both left out, wrong results; rowwise 0.23-0.27 ms). Now each tile
// keeps a vector of amax bits, reduced for a whole band by reduce_tiles(), and tile_scales()
// computes a band's scales in vectors. One thread, bench/fp8_benchmark with an extra 256K-element
// size, medians (minima) of 6 alternating runs, ms:
//                          1 x 128 256K    1 x 128 1M     rowwise 1M     128 x 128 1M
//   before                 0.073 (0.067)   0.315 (0.276)  0.253 (0.217)  0.415 (0.374)
//   vectors, tile_scales   0.059 (0.057)   0.246 (0.230)  0.223 (0.210)  0.389 (0.366)
// Two threads at 16M, the same runs' pairs varied more than this change (1x128 medians of 6-8
// alternating pairs: 2.67-2.99 ms against 2.89-3.52 before, the 4:1 loop 1.87-2.02 ms). One
// loop over a whole row, the tiles' scales read from a table, gained nothing more (dropped).
// 2026-12-07, later: with the conversion cut from 14 to 8 vector instructions (Note [FP8 casts in
// integer lanes]), a band's rows that have a partner and no NaN tile go through
// codes_and_amax_row(), whose tile loop keeps its counters and constants in registers, and
// reduce_tiles() says whether a tile holds NaN (fast[] is set again only after such a band).
// Two threads at 16M, medians (ranges) over 8 alternating runs of the two builds of each run's
// ratio to the 4:1 loop: 1x128 0.70 (0.51-0.86) -> 0.87 (0.80-0.99), rowwise 0.82 -> 0.92,
// 128x128 0.72 -> 0.86. The same build with the conversion left out (wrong codes, to measure)
// ran 1x128 at 0.89 and rowwise at 0.95 (one run of 5): the two reads of this walk, not the
// conversion, are now most of what stands between it and the loop.
// Note [Tile guesses]
// The second read of a 128-row band comes from L3 or memory, not from L1 or L2 (Note [Tile casts]),
// and costs as much as the first. Where magnitudes change slowly down the columns, a tile's
// power-of-two scale is often the scale of the tile above it: while that held for at least 7/8 of
// the tiles of the band above, a band is read once, its codes written with the scales of the band
// above and its amaxes taken in the same loop; a tile whose own scale differs (or which holds a
// NaN) has its codes written again, from its own rows. The codes are the same as the pipelined
// walk's. After a band below 7/8, the walk is the pipelined one until a band's scales match the
// band above's again. fp32 in rows of 4096, 2 threads (bench/fp8_benchmark, medians of 10
// interleaved runs, ms; a VM with a 300 MiB L3, which holds 16M fp32 but not 64M):
//                                                     64M    16M   4:1 loop, same run
//   pipelined only (the build before), scales alike   21.6   3.32   22.4  2.62
//   this, scales alike down columns                   16.6   2.64   22.3  2.48
//   this, each band's scales unlike the band above's  23.1   3.51   (pipelined)
// Guessing every band when no scale matches took 41.5 and 8.78 ms (a prototype): hence the 7/8.
template <Fp8Format kFormat, class Src>
void quantize_tiles(const Src& src, std::int64_t rows, std::int64_t cols, std::int64_t th,
                    std::int64_t tc, std::uint8_t* q, float* scale_inv,
                    const CurrentScaling& rule, std::int64_t first_band, std::int64_t last_band) {
  const bool skip_nan = rule.nan == NanAmax::kIgnore;
  const bool may_guess = th > 1 && rule.power_of_2_scales;  // rows of 1 tile read again from L1
  const std::int64_t per_row = (cols + tc - 1) / tc;
  const auto tiles = static_cast<std::size_t>(per_row);
  using DI = hn::RebindToSigned<typename Src::DF>;
  const DI di;
  const std::size_t lanes = hn::Lanes(di);
  std::vector<std::uint32_t> bits(tiles);  // amax bits of this band
  // A vector of amax bits per tile of the next band, reduced at the band's start.
  auto next = hwy::AllocateAligned<std::int32_t>(tiles * lanes);
  if (next == nullptr) throw std::bad_alloc();
  std::vector<float> scale(tiles);
  std::vector<float> above(tiles, 0.0f);  // the scales of the band above (0: none to guess with)
  std::vector<char> fast(tiles, 1);       // the tile takes to_fp8_scaled()
  bool all_fast = true;                   // every fast[k] is 1
  // Calls f(k, begin, end) for row r's piece of each tile k of its row of tiles. Inlined, with
  // f: as a function of its own, f set the conversion's constants up again for each 128-element
  // piece (1x128 at 16M took 1.75-1.9x rowwise's time, 1.4-1.5x inlined; two pairs of runs).
  const auto each_piece = [&](std::int64_t r, const auto& f) MIXPREC_VECTOR_LAMBDA {
    for (std::int64_t j = 0; j < per_row; ++j) {
      f(static_cast<std::size_t>(j), r * cols + j * tc, r * cols + std::min(cols, j * tc + tc));
    }
  };
  bool have_next = false;  // next holds the amax bits of this band (read with the band above)
  bool guess = false;      // this band is read once, its codes written with `above`
  for (std::int64_t band = first_band; band < last_band; ++band) {
    const std::int64_t r0 = band * th, r1 = std::min(rows, r0 + th);
    bool holds_nan = false;  // some tile of the band
    if (have_next) {
      holds_nan = reduce_tiles(di, next.get(), tiles, bits.data());
    } else {
      std::fill(bits.begin(), bits.end(), 0u);
      for (std::int64_t r = r0; r < r1; ++r) {
        each_piece(r, [&](std::size_t k, std::int64_t begin, std::int64_t end) HWY_ATTR {
          bits[k] = std::max(
              bits[k],
              guess && above[k] > 0.0f
                  ? quantize_range<Pass::kCodesNoNaN, kFormat>(src, begin, end, q, above[k])
                  : quantize_range<Pass::kAmax, kFormat>(src, begin, end, q, 1.0f));
        });
      }
    }
    // Calls f(begin, end) for each row's piece of tile j.
    const auto each_row = [&](std::int64_t j, const auto& f) {
      for (std::int64_t r = r0; r < r1; ++r) {
        f(r * cols + j * tc, r * cols + std::min(cols, j * tc + tc));
      }
    };
    // A tile takes to_fp8_scaled() unless it holds a NaN: current_scale() is > 0 and finite.
    // fast is set again after a band holding NaN only.
    if (!have_next) {
      holds_nan =
          std::any_of(bits.begin(), bits.end(), [](std::uint32_t b) { return b > 0x7f800000u; });
    }
    if (holds_nan || !all_fast) {
      for (std::size_t k = 0; k < tiles; ++k) fast[k] = bits[k] <= 0x7f800000u;
      all_fast = !holds_nan;
    }
    for (std::int64_t j = 0; j < per_row && holds_nan && skip_nan; ++j) {
      const auto k = static_cast<std::size_t>(j);
      if (fast[k]) continue;
      bits[k] = 0;  // a tile holding NaN, its NaNs skipped (TE): read again
      each_row(j, [&](std::int64_t begin, std::int64_t end) HWY_ATTR {
        bits[k] = std::max(bits[k],
                           quantize_range<Pass::kAmaxSkipNaN, kFormat>(src, begin, end, q, 1.0f));
      });
    }
    // A loop the compiler vectorizes (current_scale's branches become selects).
    tile_scales(bits.data(), tiles, fp8_max(kFormat), rule, scale.data(),
                scale_inv + band * per_row);
    std::size_t alike = 0;  // tiles whose scale is the one above them
    for (std::int64_t j = 0; j < per_row && may_guess; ++j) {
      const auto k = static_cast<std::size_t>(j);
      const bool same = fast[k] && scale[k] == above[k];
      alike += same ? 1 : 0;
      if (guess && !same) {  // its codes were written with another scale, or not at all
        each_row(j, [&](std::int64_t begin, std::int64_t end)
                        HWY_ATTR { quantize_codes<kFormat>(src, begin, end, q, scale[k]); });
      }
      above[k] = fast[k] ? scale[k] : 0.0f;
    }
    const bool guessed = guess;
    guess = may_guess && alike * 8 >= tiles * 7;
    have_next = false;
    if (guessed) continue;
    // The codes of this band, and the amax of the next read in the same loop (Note [Tile casts])
    // unless the next band guesses.
    const bool more = !guess && band + 1 < last_band;
    for (std::int64_t r = r0; r < r1; ++r) {
      const bool partner = more && r + th < rows;  // row r's row in the next band
      const bool accumulate = r > r0;  // the band's first row (which has a partner) sets them
      if (partner && all_fast) {
        codes_and_amax_row<kFormat>(src, r * cols, (r + th) * cols, cols, tc, q, scale.data(),
                                    next.get(), accumulate);
        continue;
      }
      each_piece(r, [&](std::size_t k, std::int64_t begin, std::int64_t end) MIXPREC_VECTOR_LAMBDA {
        std::int32_t* amax = next.get() + k * lanes;
        if (partner && fast[k]) {
          codes_and_amax<kFormat>(src, begin, begin + th * cols, end - begin, q, scale[k], amax,
                                  accumulate);
          return;
        }
        quantize_codes<kFormat>(src, begin, end, q, scale[k]);
        if (partner) {
          const auto bits_next = quantize_range<Pass::kAmax, kFormat>(src, begin + th * cols,
                                                                      end + th * cols, q, 1.0f);
          const auto v = hn::Set(di, static_cast<std::int32_t>(bits_next));
          hn::Store(accumulate ? hn::Max(hn::Load(di, amax), v) : v, di, amax);
        }
      });
    }
    have_next = more;
  }
}

// The tiles first .. last - 1 of x read as rows of `cols` (ceil(cols / tc) tiles a row of tiles,
// each th x tc, numbered row-major), calling body(tile, rows [r0, r1), columns [c0, c1)).
template <class Body>
HWY_INLINE void for_each_tile(std::int64_t rows, std::int64_t cols, std::int64_t th,
                              std::int64_t tc, std::int64_t first, std::int64_t last,
                              const Body& body) {
  const std::int64_t per_row = (cols + tc - 1) / tc;
  for (std::int64_t t = first; t < last; ++t) {
    const std::int64_t r0 = t / per_row * th, c0 = t % per_row * tc;
    body(t, r0, std::min(rows, r0 + th), c0, std::min(cols, c0 + tc));
  }
}

template <Fp8Format kFormat, class Dst>
void dequantize_tiles(const std::uint8_t* q, const float* scale_inv, std::int64_t rows,
                      std::int64_t cols, std::int64_t th, std::int64_t tc, const Dst& dst,
                      std::int64_t first, std::int64_t last) {
  for_each_tile(rows, cols, th, tc, first, last,
                [&](std::int64_t t, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                    std::int64_t c1) HWY_ATTR {
                  for (std::int64_t r = r0; r < r1; ++r) {
                    dequantize_range<kFormat>(q, r * cols + c0, r * cols + c1, scale_inv[t], dst);
                  }
                });
}

void QuantizeTiles(const TensorView& x, std::int64_t cols, std::int64_t th, std::int64_t tc,
                   std::uint8_t* q, float* scale_inv, Fp8Format format, const CurrentScaling& rule,
                   std::int64_t first_band, std::int64_t last_band) {
  with_src(x, [&](const auto& src) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      quantize_tiles<decltype(f)::value>(src, x.numel / cols, cols, th, tc, q, scale_inv, rule,
                                         first_band, last_band);
    });
  });
}

void DequantizeTiles(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                     std::int64_t th, std::int64_t tc, Fp8Format format, const TensorView& out,
                     std::int64_t first, std::int64_t last) {
  with_dst(out, [&](const auto& dst) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      dequantize_tiles<decltype(f)::value>(q, scale_inv, out.numel / cols, cols, th, tc, dst,
                                           first, last);
    });
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(QuantizeTiles);
HWY_EXPORT(DequantizeTiles);

void quantize_tiles(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                    std::int64_t tile_cols, std::uint8_t* q, float* scale_inv, Fp8Format format,
                    const CurrentScaling& rule, std::int64_t first_band, std::int64_t last_band) {
  HWY_DYNAMIC_DISPATCH(QuantizeTiles)(x, cols, tile_rows, tile_cols, q, scale_inv, format, rule,
                                      first_band, last_band);
}

void dequantize_tiles(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                      std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                      const TensorView& out, std::int64_t first_tile, std::int64_t last_tile) {
  HWY_DYNAMIC_DISPATCH(DequantizeTiles)(q, scale_inv, cols, tile_rows, tile_cols, format, out,
                                        first_tile, last_tile);
}

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
