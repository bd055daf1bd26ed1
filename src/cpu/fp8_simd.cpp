// CPU FP8 kernels, the SIMD part: one copy per compiled Highway target (foreach_target.h), picked
// at run time by HWY_DYNAMIC_DISPATCH. Spans run serially on the calling thread; src/cpu/fp8.cpp
// cuts the work into spans and threads. The element conversions are in fp8_convert-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fp8_simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>
#include <hwy/cache_control.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/fp8_convert-inl.h"
#include "cpu/fp8_simd.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/half.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

// The per-vector lambdas must be inlined into their loops (GCC kept `step` out of line, with
// spills around each call, at a third of the speed).
#define MIXPREC_VECTOR_LAMBDA HWY_ATTR __attribute__((always_inline))

HWY_BEFORE_NAMESPACE();
namespace mixprec::core::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls step(i) for each whole vector of `lanes` elements in [begin, end), four at a time for
// instruction-level parallelism; returns where the scalar tail starts.
template <class Step>
HWY_INLINE std::int64_t for_each_vector(std::int64_t begin, std::int64_t end, std::int64_t lanes,
                                        const Step& step) {
  std::int64_t i = begin;
  for (; i + 4 * lanes <= end; i += 4 * lanes) {
    step(i);
    step(i + lanes);
    step(i + 2 * lanes);
    step(i + 3 * lanes);
  }
  for (; i + lanes <= end; i += lanes) step(i);
  return i;
}

// Note [FP8 casts prefetch]
// The quantizing loops prefetch every cache line of their input kPrefetchBytes ahead. Two threads
// quantizing fp32 (amax-and-quantize, AVX3_SPR, Debian 13; bench/fp8_benchmark.cpp, minimum of 4
// runs, ms) against a plain loop with the same traffic (read 4 bytes, write 1 per element):
//                        16M elements   64M elements
//   plain loop               1.84-1.96     18.3-18.5
//   no prefetch              2.66-2.97     20.4-21.1
//   one line an iteration    2.39-2.46     17.0-19.0
//   every line, 4 KB ahead   1.90          14.2
//   every line, 8 KB ahead   1.90          14.7
// (2 KB ahead, one line an iteration, was slower than none.) One thread keeps up with memory
// without it; with both cores busy, the conversion's instructions between the loads leave fewer
// of them in flight than the plain loop has, and the prefetches make up for that.
constexpr std::int64_t kPrefetchBytes = 4096;

// Prefetches the lines of elements [i, i + n) of src, kPrefetchBytes ahead.
template <class Src>
HWY_INLINE void prefetch_ahead(const Src& src, std::int64_t i, std::int64_t n) {
  // Integer arithmetic: the addresses may lie past the tensor (a prefetch never faults).
  const auto ahead = reinterpret_cast<std::uintptr_t>(src.p + i) + kPrefetchBytes;
  const auto size = n * static_cast<std::int64_t>(sizeof(*src.p));
  for (std::int64_t b = 0; b < size; b += 64) {
    hwy::Prefetch(reinterpret_cast<const char*>(ahead + static_cast<std::uintptr_t>(b)));
  }
}

// The running maximum of |x| bits, as a float (NaN canonical).
float amax_of_bits(std::uint32_t bits) {
  return bits > 0x7f800000u ? bits_to_float(0x7fc00000u) : bits_to_float(bits);
}

// ---- The loops --------------------------------------------------------------------------------

// What quantize_range does: the amax only; the amax of the elements that are not NaN (TE's fmaxf,
// NanAmax::kIgnore); codes for any scale; codes by to_fp8_scaled(), for 0 < scale < inf, which are
// right only where no element is NaN.
enum class Pass { kAmax, kAmaxSkipNaN, kCodes, kCodesNoNaN };

// Elements [begin, end): q = fp8(float(x) * scale) unless kPass is an amax pass; returns the
// running maximum of |float(x)|'s bits (see amax_of_bits), NaNs left out by kAmaxSkipNaN.
template <Pass kPass, Fp8Format kFormat, class Src>
HWY_INLINE std::uint32_t quantize_range(const Src& src, std::int64_t begin, std::int64_t end,
                                        std::uint8_t* HWY_RESTRICT q, float scale) {
  using DF = typename Src::DF;
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto abs_mask = hn::Set(du, 0x7fffffffu);
  const auto vscale = hn::Set(df, scale);
  auto running = hn::Zero(di);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  // Loads one vector, tracks its amax and returns its codes.
  const auto step = [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
    const auto v = src.Load(df, i);
    const auto x = hn::BitCast(du, v);
    const auto a = hn::And(x, abs_mask);
    running = hn::Max(running, hn::BitCast(di, a));
    if constexpr (kPass == Pass::kCodesNoNaN) {
      return to_fp8_scaled<kFormat>(df, x, a, vscale);
    } else {
      return to_fp8<kFormat>(df, hn::Mul(v, vscale));
    }
  };
  std::int64_t tail = begin;
  if constexpr (kPass == Pass::kAmaxSkipNaN) {
    const auto above_inf = hn::Set(di, 0x7f800001);  // the least NaN bits (Lt: old Highway's)
    tail = for_each_vector(begin, end, lanes, [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
      const auto a = hn::BitCast(di, hn::And(hn::BitCast(du, src.Load(df, i)), abs_mask));
      running = hn::Max(running, hn::IfThenElseZero(hn::Lt(a, above_inf), a));  // NaN bits: 0
    });
  } else if constexpr (kPass != Pass::kAmax) {
    for (; tail + 4 * lanes <= end; tail += 4 * lanes) {
      prefetch_ahead(src, tail, 4 * lanes);  // See Note [FP8 casts prefetch]
      const auto c0 = step(tail), c1 = step(tail + lanes);
      const auto c2 = step(tail + 2 * lanes), c3 = step(tail + 3 * lanes);
      store_codes4(df, c0, c1, c2, c3, q + tail);
    }
    for (; tail + lanes <= end; tail += lanes) {
      hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, step(tail))), d8, q + tail);
    }
  } else {
    tail = for_each_vector(begin, end, lanes, [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
      running =
          hn::Max(running, hn::BitCast(di, hn::And(hn::BitCast(du, src.Load(df, i)), abs_mask)));
    });
  }
  auto bits = static_cast<std::uint32_t>(hn::GetLane(hn::MaxOfLanes(di, running)));
  for (std::int64_t i = tail; i < end; ++i) {
    const float f = src.At(i);
    const std::uint32_t a = float_to_bits(f) & 0x7fffffffu;
    if (kPass != Pass::kAmaxSkipNaN || a <= 0x7f800000u) bits = std::max(bits, a);
    if constexpr (kPass == Pass::kCodes || kPass == Pass::kCodesNoNaN) {
      q[i] = float_to_fp8_bits(f * scale, kFormat);
    }
  }
  return bits;
}

// Codes and the amax bits of [begin, end): by to_fp8_scaled() where the scale allows, again by
// to_fp8() in the rare range that holds a NaN.
template <Fp8Format kFormat, class Src>
HWY_INLINE std::uint32_t quantize_codes(const Src& src, std::int64_t begin, std::int64_t end,
                                        std::uint8_t* HWY_RESTRICT q, float scale) {
  if (scale > 0.0f && scale < bits_to_float(0x7f800000u)) {
    const std::uint32_t bits =
        quantize_range<Pass::kCodesNoNaN, kFormat>(src, begin, end, q, scale);
    if (bits <= 0x7f800000u) return bits;
  }
  return quantize_range<Pass::kCodes, kFormat>(src, begin, end, q, scale);
}

// out[i] = dtype(fp8(q[i]) * scale_inv) for i in [begin, end).
template <Fp8Format kFormat, class Dst>
HWY_INLINE void dequantize_range(const std::uint8_t* HWY_RESTRICT q, std::int64_t begin,
                                 std::int64_t end, float scale_inv, const Dst& dst) {
  using DF = typename Dst::DF;
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto vscale = hn::Set(df, scale_inv);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t tail =
      for_each_vector(begin, end, lanes, [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
        const auto b = hn::PromoteTo(du, hn::LoadU(d8, q + i));
        dst.Store(df, hn::Mul(from_fp8<kFormat>(df, b), vscale), i);
      });
  for (std::int64_t i = tail; i < end; ++i)
    dst.Put(i, fp8_bits_to_float(q[i], kFormat) * scale_inv);
}

// Note [MX blocks holding inf or NaN]
// Such a block's exponent is 0xff, the E8M0 NaN, and e8m0_to_inverse() is NaN: every element is
// NaN. Its sign would be that of NaN * x, which IEEE 754 leaves open when x is a NaN too (x86
// passes the first operand's, and a compiler may swap the operands; CUDA gives its canonical
// positive NaN), so these kernels write the positive NaN: code 0x7f, and when dequantizing, the
// quiet NaN 0x7fc00000 in the output dtype.

// Walks the MX blocks first .. last - 1, calling body(block, begin, end) with element indices.
template <class Body>
HWY_INLINE void for_each_block(std::int64_t cols, std::int64_t first, std::int64_t last,
                               const Body& body) {
  const std::int64_t per_row = (cols + 31) / 32;
  std::int64_t row = first / per_row;
  std::int64_t b = first - row * per_row;
  for (std::int64_t k = first; k < last; ++k) {
    const std::int64_t begin = row * cols + b * 32;
    body(k, begin, begin + std::min<std::int64_t>(32, cols - b * 32));
    if (++b == per_row) {
      b = 0;
      ++row;
    }
  }
}

// A whole block of 32 where vectors have a fixed length dividing 32: straight-line code, one
// reduction, and the codes stored four or two vectors at a time (1.4x the speed of the general
// path below, AVX3, in cache). Returns false, having written nothing, where it does not apply: also
// for a block holding NaN when NaNs are skipped (skip_nan).
template <Fp8Format kFormat, class Src>
HWY_INLINE bool quantize_whole_block(const Src& src, std::int64_t begin, std::uint8_t* q,
                                     std::uint8_t* scale, bool skip_nan) {
  using DF = typename Src::DF;
  constexpr std::size_t kLanes = hn::MaxLanes(DF());
  if constexpr (HWY_HAVE_SCALABLE || 32 % kLanes != 0 || kLanes < 4) {
    return false;
  } else {
    const DF df;
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    const auto abs_mask = hn::Set(du, 0x7fffffffu);
    auto running = hn::Zero(di);
    for (std::size_t k = 0; k < 32; k += kLanes) {
      const auto bits = hn::BitCast(du, src.Load(df, begin + static_cast<std::int64_t>(k)));
      running = hn::Max(running, hn::BitCast(di, hn::And(bits, abs_mask)));
    }
    const auto bits = static_cast<std::uint32_t>(hn::GetLane(hn::MaxOfLanes(di, running)));
    if (skip_nan && bits > 0x7f800000u) return false;
    const std::uint8_t e = mx_block_exponent(amax_of_bits(bits), kFormat);
    *scale = e;
    if (e == 0xffu) {  // See Note [MX blocks holding inf or NaN]
      std::memset(q + begin, 0x7f, 32);
      return true;
    }
    const auto vscale = hn::Set(df, e8m0_to_inverse(e));
    const auto codes = [&](std::size_t k) MIXPREC_VECTOR_LAMBDA {  // no NaN in a finite block
      const auto x = hn::BitCast(du, src.Load(df, begin + static_cast<std::int64_t>(k)));
      return to_fp8_scaled<kFormat>(df, x, hn::And(x, abs_mask), vscale);
    };
    for (std::size_t k = 0; k + 4 * kLanes <= 32; k += 4 * kLanes) {
      store_codes4(df, codes(k), codes(k + kLanes), codes(k + 2 * kLanes), codes(k + 3 * kLanes),
                   q + begin + k);
    }
    if constexpr (kLanes == 16) store_codes2(df, codes(0), codes(16), q + begin);
    return true;
  }
}

template <Fp8Format kFormat, class Src>
void quantize_mx(const Src& src, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                 std::int64_t first, std::int64_t last, bool skip_nan) {
  for_each_block(
      cols, first, last, [&](std::int64_t k, std::int64_t begin, std::int64_t end) HWY_ATTR {
        prefetch_ahead(src, begin, end - begin);  // See Note [FP8 casts prefetch]
        if (end - begin == 32 &&
            quantize_whole_block<kFormat>(src, begin, q, scales + k, skip_nan)) {
          return;
        }
        std::uint32_t bits = quantize_range<Pass::kAmax, kFormat>(src, begin, end, q, 1.0f);
        const bool has_nan = bits > 0x7f800000u;
        if (has_nan && skip_nan) {
          bits = quantize_range<Pass::kAmaxSkipNaN, kFormat>(src, begin, end, q, 1.0f);
        }
        const std::uint8_t e = mx_block_exponent(amax_of_bits(bits), kFormat);
        scales[k] = e;
        if (e == 0xffu) {  // See Note [MX blocks holding inf or NaN]
          std::memset(q + begin, 0x7f, static_cast<std::size_t>(end - begin));
        } else if (has_nan) {
          // NaNs skipped by the amax (TE): they become the format's NaN, the rest scale as usual.
          quantize_range<Pass::kCodes, kFormat>(src, begin, end, q, e8m0_to_inverse(e));
        } else {
          // A finite block: no NaN, and the scale 2^(127 - e) is positive and finite.
          quantize_range<Pass::kCodesNoNaN, kFormat>(src, begin, end, q, e8m0_to_inverse(e));
        }
      });
}

template <Fp8Format kFormat, class Dst>
void dequantize_mx(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                   const Dst& dst, std::int64_t first, std::int64_t last) {
  for_each_block(cols, first, last,
                 [&](std::int64_t k, std::int64_t begin, std::int64_t end) HWY_ATTR {
                   if (scales[k] == 0xffu) {  // See Note [MX blocks holding inf or NaN]
                     for (std::int64_t i = begin; i < end; ++i)
                       dst.Put(i, bits_to_float(0x7fc00000u));
                   } else {
                     dequantize_range<kFormat>(q, begin, end, e8m0_to_float(scales[k]), dst);
                   }
                 });
}

// Codes of the elements [c, c + n) by to_fp8_scaled() (0 < scale < inf, no NaN among them), and
// in the same loop the amax bits of [a, a + n): see Note [Tile casts].
template <Fp8Format kFormat, class Src>
HWY_INLINE std::uint32_t codes_and_amax(const Src& src, std::int64_t c, std::int64_t a,
                                        std::int64_t n, std::uint8_t* HWY_RESTRICT q, float scale) {
  using DF = typename Src::DF;
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto abs_mask = hn::Set(du, 0x7fffffffu);
  const auto vscale = hn::Set(df, scale);
  auto running = hn::Zero(di);
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(df));
  const auto step = [&](std::int64_t i) MIXPREC_VECTOR_LAMBDA {
    const auto y = hn::BitCast(du, src.Load(df, a + i));
    running = hn::Max(running, hn::BitCast(di, hn::And(y, abs_mask)));
    const auto x = hn::BitCast(du, src.Load(df, c + i));
    return to_fp8_scaled<kFormat>(df, x, hn::And(x, abs_mask), vscale);
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
  auto bits = static_cast<std::uint32_t>(hn::GetLane(hn::MaxOfLanes(di, running)));
  for (; i < n; ++i) {
    bits = std::max(bits, float_to_bits(src.At(a + i)) & 0x7fffffffu);
    q[c + i] = float_to_fp8_bits(src.At(c + i) * scale, kFormat);
  }
  return bits;
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
// alone reads 128 short rows 16 KiB apart: 0.39x the loop.
template <Fp8Format kFormat, class Src>
void quantize_tiles(const Src& src, std::int64_t rows, std::int64_t cols, std::int64_t th,
                    std::int64_t tc, std::uint8_t* q, float* scale_inv,
                    const CurrentScaling& rule, std::int64_t first_band, std::int64_t last_band) {
  const bool skip_nan = rule.nan == NanAmax::kIgnore;
  const std::int64_t per_row = (cols + tc - 1) / tc;
  const auto tiles = static_cast<std::size_t>(per_row);
  std::vector<std::uint32_t> bits(tiles), next(tiles);  // amax bits of this band, of the next
  std::vector<float> scale(tiles);
  std::vector<char> fast(tiles);  // the tile takes codes_and_amax()
  // Calls f(k, begin, end) for row r's piece of each tile k of its row of tiles.
  const auto each_piece = [&](std::int64_t r, const auto& f) {
    for (std::int64_t j = 0; j < per_row; ++j) {
      f(static_cast<std::size_t>(j), r * cols + j * tc, r * cols + std::min(cols, j * tc + tc));
    }
  };
  for (std::int64_t r = first_band * th; r < std::min(rows, first_band * th + th); ++r) {
    each_piece(r, [&](std::size_t k, std::int64_t begin, std::int64_t end) HWY_ATTR {
      next[k] = std::max(next[k], quantize_range<Pass::kAmax, kFormat>(src, begin, end, q, 1.0f));
    });
  }
  for (std::int64_t band = first_band; band < last_band; ++band) {
    const std::int64_t r0 = band * th, r1 = std::min(rows, r0 + th);
    bits.swap(next);
    std::fill(next.begin(), next.end(), 0u);
    for (std::int64_t j = 0; j < per_row; ++j) {
      const auto k = static_cast<std::size_t>(j);
      const bool nan = bits[k] > 0x7f800000u;
      if (nan && skip_nan) {  // a tile holding NaN, its NaNs skipped (TE): read again
        bits[k] = 0;
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t begin = r * cols + j * tc, end = r * cols + std::min(cols, j * tc + tc);
          bits[k] = std::max(
              bits[k], quantize_range<Pass::kAmaxSkipNaN, kFormat>(src, begin, end, q, 1.0f));
        }
      }
      scale[k] = current_scale(amax_of_bits(bits[k]), fp8_max(kFormat), rule);
      scale_inv[band * per_row + j] = 1.0f / scale[k];
      fast[k] = !nan && scale[k] > 0.0f && scale[k] < bits_to_float(0x7f800000u);
    }
    const bool more = band + 1 < last_band;
    for (std::int64_t r = r0; r < r1; ++r) {
      const bool partner = more && r + th < rows;  // row r's row in the next band
      each_piece(r, [&](std::size_t k, std::int64_t begin, std::int64_t end) HWY_ATTR {
        if (partner && fast[k]) {
          next[k] = std::max(next[k], codes_and_amax<kFormat>(src, begin, begin + th * cols,
                                                              end - begin, q, scale[k]));
          return;
        }
        quantize_codes<kFormat>(src, begin, end, q, scale[k]);
        if (partner) {
          next[k] = std::max(next[k], quantize_range<Pass::kAmax, kFormat>(
                                          src, begin + th * cols, end + th * cols, q, 1.0f));
        }
      });
    }
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

// ---- Dispatch on the dtype and the format -----------------------------------------------------

// Calls fn(src) with the source of x's dtype.
template <class Fn>
HWY_INLINE void with_src(const TensorView& x, const Fn& fn) {
  switch (x.dtype) {
    case DType::kFloat32:
      fn(F32Src{static_cast<const float*>(x.data)});
      return;
    case DType::kFloat64:
      fn(F64Src{static_cast<const double*>(x.data)});
      return;
    case DType::kFloat16:
      fn(F16Src{static_cast<const std::uint16_t*>(x.data)});
      return;
    case DType::kBFloat16:
      fn(BF16Src{static_cast<const std::uint16_t*>(x.data)});
      return;
  }
}

template <class Fn>
HWY_INLINE void with_dst(const TensorView& out, const Fn& fn) {
  switch (out.dtype) {
    case DType::kFloat32:
      fn(F32Dst{static_cast<float*>(out.data)});
      return;
    case DType::kFloat64:
      fn(F64Dst{static_cast<double*>(out.data)});
      return;
    case DType::kFloat16:
      fn(F16Dst{static_cast<std::uint16_t*>(out.data)});
      return;
    case DType::kBFloat16:
      fn(BF16Dst{static_cast<std::uint16_t*>(out.data)});
      return;
  }
}

// Calls fn(std::integral_constant<Fp8Format, format>) so the format is a compile-time constant.
template <class Fn>
HWY_INLINE void with_format(Fp8Format format, const Fn& fn) {
  if (format == Fp8Format::kE4M3) {
    fn(std::integral_constant<Fp8Format, Fp8Format::kE4M3>());
  } else {
    fn(std::integral_constant<Fp8Format, Fp8Format::kE5M2>());
  }
}

float AmaxSpan(const TensorView& x, NanAmax nan) {
  std::uint32_t bits = 0;
  with_src(x, [&](const auto& src) HWY_ATTR {
    bits = nan == NanAmax::kIgnore
               ? quantize_range<Pass::kAmaxSkipNaN, Fp8Format::kE4M3>(src, 0, x.numel, nullptr, 1.0f)
               : quantize_range<Pass::kAmax, Fp8Format::kE4M3>(src, 0, x.numel, nullptr, 1.0f);
  });
  return amax_of_bits(bits);
}

float QuantizeSpan(const TensorView& x, std::uint8_t* q, Fp8Format format, float scale,
                   bool want_amax, NanAmax nan) {
  std::uint32_t bits = 0;
  with_src(x, [&](const auto& src) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      bits = quantize_codes<decltype(f)::value>(src, 0, x.numel, q, scale);
    });
  });
  if (!want_amax) return 0.0f;
  // A span holding NaN, its NaNs skipped (TE): a second read, only of such a rare span.
  if (bits > 0x7f800000u && nan == NanAmax::kIgnore) return AmaxSpan(x, nan);
  return amax_of_bits(bits);
}

void DequantizeSpan(const std::uint8_t* q, Fp8Format format, float scale_inv,
                    const TensorView& out) {
  with_dst(out, [&](const auto& dst) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      dequantize_range<decltype(f)::value>(q, 0, out.numel, scale_inv, dst);
    });
  });
}

void QuantizeMxBlocks(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                      Fp8Format format, NanAmax nan, std::int64_t first, std::int64_t last) {
  with_src(x, [&](const auto& src) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      quantize_mx<decltype(f)::value>(src, cols, q, scales, first, last, nan == NanAmax::kIgnore);
    });
  });
}

void DequantizeMxBlocks(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                        Fp8Format format, const TensorView& out, std::int64_t first,
                        std::int64_t last) {
  with_dst(out, [&](const auto& dst) HWY_ATTR {
    with_format(format, [&](auto f) HWY_ATTR {
      dequantize_mx<decltype(f)::value>(q, scales, cols, dst, first, last);
    });
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

// The target this copy was compiled for, so tests can see which one the dispatcher picked.
std::int64_t Fp8CompiledTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace mixprec::core::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mixprec::core::cpu {

HWY_EXPORT(AmaxSpan);
HWY_EXPORT(QuantizeSpan);
HWY_EXPORT(DequantizeSpan);
HWY_EXPORT(QuantizeMxBlocks);
HWY_EXPORT(DequantizeMxBlocks);
HWY_EXPORT(QuantizeTiles);
HWY_EXPORT(DequantizeTiles);
HWY_EXPORT(Fp8CompiledTarget);

float amax_span(const TensorView& x, NanAmax nan) { return HWY_DYNAMIC_DISPATCH(AmaxSpan)(x, nan); }

float quantize_span(const TensorView& x, std::uint8_t* q, Fp8Format format, float scale,
                    bool want_amax, NanAmax nan) {
  return HWY_DYNAMIC_DISPATCH(QuantizeSpan)(x, q, format, scale, want_amax, nan);
}

void dequantize_span(const std::uint8_t* q, Fp8Format format, float scale_inv,
                     const TensorView& out) {
  HWY_DYNAMIC_DISPATCH(DequantizeSpan)(q, format, scale_inv, out);
}

void quantize_mx_blocks(const TensorView& x, std::int64_t cols, std::uint8_t* q,
                        std::uint8_t* scales, Fp8Format format, NanAmax nan,
                        std::int64_t first_block, std::int64_t last_block) {
  HWY_DYNAMIC_DISPATCH(QuantizeMxBlocks)(x, cols, q, scales, format, nan, first_block, last_block);
}

void dequantize_mx_blocks(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                          Fp8Format format, const TensorView& out, std::int64_t first_block,
                          std::int64_t last_block) {
  HWY_DYNAMIC_DISPATCH(DequantizeMxBlocks)(q, scales, cols, format, out, first_block, last_block);
}

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

std::int64_t fp8_dispatched_simd_target() { return HWY_DYNAMIC_DISPATCH(Fp8CompiledTarget)(); }

}  // namespace mixprec::core::cpu
#endif  // HWY_ONCE
