// The per-thread work of the CUDA FP8 kernels (internal; src/cuda/fp8.cu) as host/device code, so
// that tests/cuda/fp8_element_test.cpp and cuda_fp8_test.cpp run it on the host, every emulated
// thread in turn, without a GPU. The element math is mixprec/core/fp8.h's, unchanged; what this
// file adds is how a thread loads and stores each dtype, which elements it takes, and the NaN bits
// of a product (below).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/core/fp8.h"
#include "mixprec/core/half.h"
#include "mixprec/core/macros.h"

namespace mixprec::core::cuda {

// Note [NaN bits of the CUDA FP8 kernels]
// The CPU kernels (src/cpu/fp8_simd.cpp) compute float(x) * scale on an x86 or Arm core, which
// returns a NaN operand itself, quieted, with its sign; CUDA's arithmetic and conversions return
// the canonical NaN 0x7fffffff instead. The sign of a NaN is kept by float_to_fp8_bits (0x7f or
// 0xff) and a dequantized NaN's bits reach the output, so to give the CPU kernels' bits the code
// below never lets a NaN operand through the device's arithmetic: cpu_mul, load and store treat
// NaNs with integer code. Where the CPU kernels fix a NaN themselves, so does this code: an amax
// that is NaN is the quiet NaN 0x7fc00000, and an MX block holding inf or NaN (exponent 0xff) has
// every element 0x7f and dequantizes to 0x7fc00000 in the output dtype (Note [MX blocks holding
// inf or NaN] in fp8_mx_simd.cpp). A NaN made from non-NaN operands (inf * 0, from a scale of 0 or
// inf) is the device's canonical NaN, whose bits a CPU does not share; no scale rule makes those.

/// True for a NaN (integer test: any floating-point flags).
MIXPREC_HOST_DEVICE inline bool is_nan_bits(float v) {
  return (float_to_bits(v) & 0x7fffffffu) > 0x7f800000u;
}

/// a * b with a CPU's NaN: a NaN operand comes out quieted, `a` first (Note [NaN bits of the
/// CUDA FP8 kernels]); otherwise the IEEE product, rounded to nearest even.
MIXPREC_HOST_DEVICE inline float cpu_mul(float a, float b) {
  if (is_nan_bits(a)) return bits_to_float(float_to_bits(a) | 0x00400000u);
  if (is_nan_bits(b)) return bits_to_float(float_to_bits(b) | 0x00400000u);
  return a * b;
}

/// |v|'s bits: as unsigned integers these order as the magnitudes, and every NaN is above +inf,
/// so the integer max of them is max |x| with a NaN winning (NaN-propagating).
MIXPREC_HOST_DEVICE inline std::uint32_t abs_bits(float v) {
  return float_to_bits(v) & 0x7fffffffu;
}

/// A max of abs_bits values as the amax to record: NaN as the quiet NaN 0x7fc00000, as the CPU
/// kernels give it (Note [NaN bits of the CUDA FP8 kernels]).
MIXPREC_HOST_DEVICE inline std::uint32_t canonical_amax_bits(std::uint32_t bits) {
  return bits > 0x7f800000u ? 0x7fc00000u : bits;
}

/// abs_bits(v) as a candidate for an amax: 0 for a NaN when NaNs are skipped (NanAmax::kIgnore,
/// TE's fmaxf), so the max of the candidates is the max over the other elements.
MIXPREC_HOST_DEVICE inline std::uint32_t amax_candidate(float v, bool skip_nan) {
  const std::uint32_t a = abs_bits(v);
  return skip_nan && a > 0x7f800000u ? 0u : a;
}

/// The larger of two abs_bits values.
MIXPREC_HOST_DEVICE inline std::uint32_t max_bits(std::uint32_t a, std::uint32_t b) {
  return a > b ? a : b;
}

/// How an FP8 kernel reads an element of each input dtype as float and writes a float result
/// rounded to the dtype (nearest even), with NaNs as a CPU converts them.
template <DType kType>
struct Fp8Io;
template <>
struct Fp8Io<DType::kFloat32> {
  using Storage = float;
  MIXPREC_HOST_DEVICE static float load(float v) { return v; }
  MIXPREC_HOST_DEVICE static float store(float v) { return v; }
};
template <>
struct Fp8Io<DType::kFloat64> {
  using Storage = double;
  MIXPREC_HOST_DEVICE static float load(double v) {
    const std::uint64_t b = double_to_bits(v);
    if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) {
      // cvtsd2ss: the sign and the top 23 payload bits, quieted.
      return bits_to_float(static_cast<std::uint32_t>(b >> 32 & 0x80000000u) | 0x7fc00000u |
                           static_cast<std::uint32_t>(b >> 29 & 0x7fffffu));
    }
    return static_cast<float>(v);  // round to nearest even (cvt.rn.f32.f64 on the device)
  }
  MIXPREC_HOST_DEVICE static double store(float v) {
    if (is_nan_bits(v)) {
      // cvtss2sd: the sign and the payload, quieted.
      const std::uint64_t b = float_to_bits(v);
      const std::uint64_t d =
          (b & 0x80000000u) << 32 | 0x7ff8000000000000ull | (b & 0x7fffffu) << 29;
      double out;
      __builtin_memcpy(&out, &d, sizeof(out));
      return out;
    }
    return static_cast<double>(v);  // exact
  }
};
template <>
struct Fp8Io<DType::kFloat16> {
  using Storage = std::uint16_t;
  MIXPREC_HOST_DEVICE static float load(std::uint16_t v) { return half_bits_to_float(v); }
  MIXPREC_HOST_DEVICE static std::uint16_t store(float v) { return float_to_half_bits(v); }
};
template <>
struct Fp8Io<DType::kBFloat16> {
  using Storage = std::uint16_t;
  MIXPREC_HOST_DEVICE static float load(std::uint16_t v) { return bf16_bits_to_float(v); }
  MIXPREC_HOST_DEVICE static std::uint16_t store(float v) { return float_to_bf16_bits(v); }
};

// Each thread of a grid-stride loop takes kUnroll elements, stride apart, per step and loads them
// all before using them: kUnroll loads in flight per thread, for the memory bandwidth (one load
// per thread in flight leaves most of it unused). The elements a thread takes are those of the
// plain loop (first, first + stride, ...), so the results are the same.
constexpr int kUnroll = 4;

/// A grid-stride share of a per-tensor quantize: elements first, first + stride, ... of n.
/// q[i] = float_to_fp8_bits(float(x[i]) * scale); returns the max of amax_candidate(float(x[i]),
/// skip_nan) over the share (0 for an empty one) when kAmax, else 0.
template <DType kType, Fp8Format kFormat, bool kAmax>
MIXPREC_HOST_DEVICE std::uint32_t quantize_share(const typename Fp8Io<kType>::Storage* x,
                                                 std::uint8_t* q, std::int64_t n, float scale,
                                                 std::int64_t first, std::int64_t stride,
                                                 bool skip_nan = false) {
  std::uint32_t amax = 0;
  for (std::int64_t base = first; base < n; base += kUnroll * stride) {
    float v[kUnroll];
    for (int k = 0; k < kUnroll; ++k) {
      const std::int64_t i = base + k * stride;
      v[k] = i < n ? Fp8Io<kType>::load(x[i]) : 0.0f;
    }
    for (int k = 0; k < kUnroll; ++k) {
      const std::int64_t i = base + k * stride;
      if (i >= n) break;
      if (kAmax) amax = max_bits(amax, amax_candidate(v[k], skip_nan));
      q[i] = float_to_fp8_bits(cpu_mul(v[k], scale), kFormat);
    }
  }
  return amax;
}

/// A grid-stride share of amax: the max of amax_candidate(float(x[i]), skip_nan) (0 for an empty
/// share).
template <DType kType>
MIXPREC_HOST_DEVICE std::uint32_t amax_share(const typename Fp8Io<kType>::Storage* x,
                                             std::int64_t n, std::int64_t first,
                                             std::int64_t stride, bool skip_nan = false) {
  std::uint32_t amax = 0;
  for (std::int64_t base = first; base < n; base += kUnroll * stride) {
    std::uint32_t bits[kUnroll];
    for (int k = 0; k < kUnroll; ++k) {
      const std::int64_t i = base + k * stride;
      bits[k] = i < n ? amax_candidate(Fp8Io<kType>::load(x[i]), skip_nan) : 0u;
    }
    for (int k = 0; k < kUnroll; ++k) amax = max_bits(amax, bits[k]);
  }
  return amax;
}

/// A grid-stride share of a per-tensor dequantize: out[i] = dtype(fp8(q[i]) * scale_inv).
template <DType kType, Fp8Format kFormat>
MIXPREC_HOST_DEVICE void dequantize_share(const std::uint8_t* q, float scale_inv,
                                          typename Fp8Io<kType>::Storage* out, std::int64_t n,
                                          std::int64_t first, std::int64_t stride) {
  for (std::int64_t base = first; base < n; base += kUnroll * stride) {
    std::uint8_t b[kUnroll];
    for (int k = 0; k < kUnroll; ++k) {
      const std::int64_t i = base + k * stride;
      b[k] = i < n ? q[i] : std::uint8_t{0};
    }
    for (int k = 0; k < kUnroll; ++k) {
      const std::int64_t i = base + k * stride;
      if (i >= n) break;
      out[i] = Fp8Io<kType>::store(cpu_mul(fp8_bits_to_float(b[k], kFormat), scale_inv));
    }
  }
}

// ---- MXFP8: one group of kMxBlock threads (a warp on the device) per block of 32 elements ------

constexpr int kMxBlock = 32;  ///< elements per MX block (OCP MX v1.0)

/// Where MX block `block` (counted over all rows, ceil(cols / 32) per row) of a row-major
/// [rows, cols] tensor starts, and how many elements it has (32, or fewer at a row's end).
struct MxBlockSpan {
  std::int64_t begin;  ///< index of its first element
  int size;            ///< its elements, 1..32
};
MIXPREC_HOST_DEVICE inline MxBlockSpan mx_block_span(std::int64_t block, std::int64_t cols) {
  const std::int64_t per_row = (cols + kMxBlock - 1) / kMxBlock;
  const std::int64_t row = block / per_row;
  const std::int64_t col = (block - row * per_row) * kMxBlock;
  const std::int64_t left = cols - col;
  return {row * cols + col, static_cast<int>(left < kMxBlock ? left : kMxBlock)};
}

/// A warp's grid-stride walk over the MX blocks first, first + stride, ... of a row-major
/// [rows, cols] tensor, keeping the block's row and place in its row as it steps, so that a step
/// costs no 64-bit division (slow on a GPU).
class MxWalk {
 public:
  MIXPREC_HOST_DEVICE MxWalk(std::int64_t cols, std::int64_t first, std::int64_t stride)
      : cols_(cols),
        per_row_((cols + kMxBlock - 1) / kMxBlock),
        block_(first),
        row_(first / per_row_),
        in_row_(first - row_ * per_row_),
        step_rows_(stride / per_row_),
        step_in_row_(stride - step_rows_ * per_row_),
        stride_(stride) {}
  /// The block's index over all rows (its scale's index).
  MIXPREC_HOST_DEVICE std::int64_t block() const { return block_; }
  /// The block's elements: as mx_block_span(block(), cols).
  MIXPREC_HOST_DEVICE MxBlockSpan span() const {
    const std::int64_t col = in_row_ * kMxBlock, left = cols_ - col;
    return {row_ * cols_ + col, static_cast<int>(left < kMxBlock ? left : kMxBlock)};
  }
  /// On to block() + stride.
  MIXPREC_HOST_DEVICE void next() {
    block_ += stride_;
    row_ += step_rows_;
    in_row_ += step_in_row_;
    if (in_row_ >= per_row_) {
      in_row_ -= per_row_;
      ++row_;
    }
  }

 private:
  std::int64_t cols_, per_row_, block_, row_, in_row_, step_rows_, step_in_row_, stride_;
};

/// Lane `lane`'s element of an MX block as float (0 past the block's end, which counts as 0 in
/// the block's amax).
template <DType kType>
MIXPREC_HOST_DEVICE float mx_lane_load(const typename Fp8Io<kType>::Storage* x,
                                       const MxBlockSpan& span, int lane) {
  return lane < span.size ? Fp8Io<kType>::load(x[span.begin + lane]) : 0.0f;
}

/// After the group's max of amax_candidate (`amax_bits`, the same in every lane): the block's E8M0
/// exponent (lane 0 stores it) and lane `lane`'s element, stored as
/// float_to_fp8_bits(v * e8m0_to_inverse(e)), or 0x7f in a block holding inf or NaN (e = 0xff;
/// Note [NaN bits of the CUDA FP8 kernels]).
template <Fp8Format kFormat>
MIXPREC_HOST_DEVICE std::uint8_t mx_lane_store(float v, std::uint32_t amax_bits,
                                               const MxBlockSpan& span, int lane, std::uint8_t* q,
                                               std::uint8_t* scale) {
  const std::uint8_t e = mx_block_exponent(bits_to_float(amax_bits), kFormat);
  if (lane == 0) *scale = e;
  if (lane < span.size) {
    q[span.begin + lane] = e == 0xffu ? std::uint8_t{0x7f}
                                      : float_to_fp8_bits(cpu_mul(v, e8m0_to_inverse(e)), kFormat);
  }
  return e;
}

/// MX dequantize of one element: out[i] = dtype(fp8(q[i]) * 2^(e - 127)) for the exponent `e`
/// of i's block; the quiet NaN 0x7fc00000 in the dtype when e = 0xff (the E8M0 NaN).
template <DType kType, Fp8Format kFormat>
MIXPREC_HOST_DEVICE typename Fp8Io<kType>::Storage mx_dequantize_element(std::uint8_t q,
                                                                         std::uint8_t e) {
  if (e == 0xffu) return Fp8Io<kType>::store(bits_to_float(0x7fc00000u));
  return Fp8Io<kType>::store(cpu_mul(fp8_bits_to_float(q, kFormat), e8m0_to_float(e)));
}

/// Index of the exponent of element i of a row-major [rows, cols] tensor: its row's blocks
/// first, ceil(cols / 32) per row (for tests; the kernels walk the blocks with MxWalk).
MIXPREC_HOST_DEVICE inline std::int64_t mx_scale_index(std::int64_t i, std::int64_t cols) {
  const std::int64_t per_row = (cols + kMxBlock - 1) / kMxBlock;
  const std::int64_t row = i / cols;
  return row * per_row + (i - row * cols) / kMxBlock;
}

// ---- Tiles: one CUDA block per tile, its threads striding over the tile's elements ------------

/// Where tile t of a row-major [rows, cols] tensor cut into th x tc tiles lies: tiles numbered
/// row-major, ceil(cols / tc) to a row of tiles, those at the bottom and right edges smaller.
struct TileSpan {
  std::int64_t r0, c0;  ///< its first row and column
  std::int64_t h, w;    ///< its rows and columns
};
MIXPREC_HOST_DEVICE inline TileSpan tile_span(std::int64_t t, std::int64_t rows, std::int64_t cols,
                                              std::int64_t th, std::int64_t tc) {
  const std::int64_t per_row = (cols + tc - 1) / tc;
  const std::int64_t r0 = t / per_row * th, c0 = t % per_row * tc;
  return {r0, c0, r0 + th < rows ? th : rows - r0, c0 + tc < cols ? tc : cols - c0};
}

/// The tensor index of element k (row-major inside the tile) of a tile.
MIXPREC_HOST_DEVICE inline std::int64_t tile_element(const TileSpan& span, std::int64_t cols,
                                                     std::int64_t k) {
  return (span.r0 + k / span.w) * cols + span.c0 + k % span.w;
}

/// A thread's share of a tile's amax: the max of amax_candidate over the tile's elements first,
/// first + stride, ... (0 for an empty share).
template <DType kType>
MIXPREC_HOST_DEVICE std::uint32_t tile_amax_share(const typename Fp8Io<kType>::Storage* x,
                                                  std::int64_t cols, const TileSpan& span,
                                                  std::int64_t first, std::int64_t stride,
                                                  bool skip_nan) {
  std::uint32_t bits = 0;
  for (std::int64_t k = first; k < span.h * span.w; k += stride) {
    bits = max_bits(bits,
                    amax_candidate(Fp8Io<kType>::load(x[tile_element(span, cols, k)]), skip_nan));
  }
  return bits;
}

/// A tile's scale from the max of its threads' shares: the current rule on the amax (a NaN amax
/// as 0x7fc00000, Note [NaN bits of the CUDA FP8 kernels]).
template <Fp8Format kFormat>
MIXPREC_HOST_DEVICE float tile_scale(std::uint32_t amax_bits, const CurrentScaling& rule) {
  return current_scale(bits_to_float(canonical_amax_bits(amax_bits)), fp8_max(kFormat), rule);
}

/// A thread's share of a tile's codes: elements first, first + stride, ... times the tile's scale.
template <DType kType, Fp8Format kFormat>
MIXPREC_HOST_DEVICE void tile_quantize_share(const typename Fp8Io<kType>::Storage* x,
                                             std::int64_t cols, const TileSpan& span, float scale,
                                             std::uint8_t* q, std::int64_t first,
                                             std::int64_t stride) {
  for (std::int64_t k = first; k < span.h * span.w; k += stride) {
    const std::int64_t i = tile_element(span, cols, k);
    q[i] = float_to_fp8_bits(cpu_mul(Fp8Io<kType>::load(x[i]), scale), kFormat);
  }
}

/// Tile dequantize of element i: its code times its tile's scale_inv (per_row = ceil(cols / tc)).
template <DType kType, Fp8Format kFormat>
MIXPREC_HOST_DEVICE typename Fp8Io<kType>::Storage tile_dequantize_element(
    const std::uint8_t* q, const float* scale_inv, std::int64_t i, std::int64_t cols,
    std::int64_t th, std::int64_t tc, std::int64_t per_row) {
  const std::int64_t t = i / cols / th * per_row + i % cols / tc;
  return Fp8Io<kType>::store(cpu_mul(fp8_bits_to_float(q[i], kFormat), scale_inv[t]));
}

// ---- The delayed update: tensors by value in the kernel's parameters ---------------------------

constexpr int kDelayedPerLaunch = 96;  ///< tensors per launch (40 bytes each: 4 KiB of parameters)

/// The tensors of one launch of the delayed update; thread i runs delayed_update_one on tensors[i].
struct DelayedBatch {
  DelayedTensor tensors[kDelayedPerLaunch];
  int count;
};

/// Tensors first, first + 1, ... (at most kDelayedPerLaunch of them, none past count).
inline DelayedBatch delayed_batch(const DelayedTensor* tensors, std::size_t count,
                                  std::size_t first) {
  DelayedBatch batch{};
  while (first + static_cast<std::size_t>(batch.count) < count && batch.count < kDelayedPerLaunch) {
    batch.tensors[batch.count] = tensors[first + static_cast<std::size_t>(batch.count)];
    ++batch.count;
  }
  return batch;
}

}  // namespace mixprec::core::cuda
