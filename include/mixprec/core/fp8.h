// FP8 scaling in the framework-free core: the FP8 formats, the three scale rules (delayed, current,
// MXFP8 block scales) as host/device functions, and the FP8 kernels on raw buffers. The kernels are
// part of mixprec's one kernel dispatch point (src/core/kernels.cpp): they validate their arguments
// and run on the CPU or, for CUDA buffers, on the device (no host synchronisation). docs/fp8.md
// gives the formulas with their sources (Transformer Engine, torchao, the OCP MX spec v1.0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/core/half.h"
#include "mixprec/core/macros.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// The two FP8 formats, as PyTorch's float8_e4m3fn and float8_e5m2.
enum class Fp8Format : std::uint8_t {
  kE4M3,  ///< 4 exponent bits, 3 mantissa bits, bias 7: largest finite 448, no inf, NaN 0x7f/0xff
  kE5M2,  ///< 5 exponent bits, 2 mantissa bits, bias 15: largest finite 57344, IEEE inf and NaN
};

/// The largest finite value of `format`: 448 (E4M3) or 57344 (E5M2).
MIXPREC_HOST_DEVICE constexpr float fp8_max(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
}

/// "e4m3" or "e5m2", for messages.
const char* fp8_format_name(Fp8Format format);

/// How the delayed rule reduces an amax history to one amax (TE's amax_compute_algo).
enum class AmaxAlgo : std::uint8_t {
  kMax,         ///< the largest amax of the window (TE "max", the default)
  kMostRecent,  ///< this iteration's amax (TE "most_recent")
};

/// How an amax treats NaN elements. The anchors differ: Transformer Engine's kernels take the
/// max with fmaxf, which skips a NaN (its cast amax in util/vectorized_pointwise.h, current
/// scaling's in recipe/current_scaling.cu, the MXFP8 block amax in cast/mxfp8/quantize_mxfp8.cuh,
/// the history max in recipe/delayed_scaling.cu); torchao takes x.abs().max(), which propagates it.
enum class NanAmax : std::uint8_t {
  kIgnore,     ///< TE: NaN elements are skipped (a block or tensor of NaNs only has amax 0)
  kPropagate,  ///< torchao, PyTorch's x.abs().max(): any NaN element makes the amax NaN
};

/// The margins delayed_scale() takes: 2^margin must be a normal float32.
inline constexpr int kMinMargin = -126;
inline constexpr int kMaxMargin = 127;

/// Settings of the delayed rule (TE DelayedScaling; the defaults are TE's).
struct DelayedScaling {
  std::int64_t history_len = 1024;  ///< amaxes kept per tensor, this iteration's included
  AmaxAlgo algo = AmaxAlgo::kMax;   ///< how the history is reduced
  int margin = 0;  ///< the scale is divided by 2^margin, in [kMinMargin, kMaxMargin]
  NanAmax nan = NanAmax::kIgnore;  ///< NaN slots of the history: skipped by kMax (TE), or NaN
};

/// Settings of the current rule (torchao "tensorwise", TE Float8CurrentScaling).
struct CurrentScaling {
  float eps = 1e-12f;              ///< amaxes below eps count as eps (torchao's EPS)
  bool power_of_2_scales = false;  ///< round the scale down to a power of two
  NanAmax nan = NanAmax::kIgnore;  ///< NaN elements in the tensor's amax (kPropagate: scale 1)
};

// ---- The scale rules: each in exactly this one place, used by the CPU and the CUDA kernels ----

/// The delayed rule's new scale from the reduced `amax` of a tensor's history, as TE's fused kernel
/// computes it (recipe/delayed_scaling.cu): (fp8_max * 2^-margin) / amax, one rounding, when amax
/// is finite and > 0, else `old_scale` (0, inf and NaN keep the scale); an infinite result (a tiny
/// amax) becomes the largest finite float (TE PR #786). TE's unfused Python path, (fp8_max /
/// amax) / 2^margin, rounds twice and overflows sooner: the two differ only where a margin meets
/// an overflowing or subnormal scale.
MIXPREC_HOST_DEVICE inline float delayed_scale(float amax, float old_scale, float fp8_max,
                                               int margin) {
  if (!(amax > 0.0f) || is_nonfinite(amax)) return old_scale;
  // fp8_max * 2^-margin, exact (or inf, as TE's float product), for margin in [kMinMargin,
  // kMaxMargin] (the kernels check it): 2^margin is then a normal float.
  const float scaled_max = fp8_max / bits_to_float(static_cast<std::uint32_t>(127 + margin) << 23);
  float scale = scaled_max / amax;
  if (is_nonfinite(scale)) scale = bits_to_float(0x7f7fffffu);  // FLT_MAX
  return scale;
}

/// The current rule's scale for a tensor (or tile) of this `amax`: fp8_max / max(amax, eps)
/// (torchao), with TE's guards (recipe_common.cuh, compute_scale_from_amax): an inf or NaN amax,
/// or an amax of 0 with eps 0, gives 1; an infinite scale the largest finite float. With
/// power_of_2_scales it is rounded down to a power of two (its mantissa bits cleared).
MIXPREC_HOST_DEVICE inline float current_scale(float amax, float fp8_max,
                                               const CurrentScaling& rule) {
  if (is_nonfinite(amax)) return 1.0f;
  const float clamped = amax < rule.eps ? rule.eps : amax;
  if (clamped == 0.0f) return 1.0f;
  float scale = fp8_max / clamped;
  if (is_nonfinite(scale)) scale = bits_to_float(0x7f7fffffu);
  if (rule.power_of_2_scales) scale = bits_to_float(float_to_bits(scale) & 0xff800000u);
  return scale;
}

/// The MXFP8 block rule (OCP MX v1.0 E8M0 scale, chosen as TE MXFP8BlockScaling does): the biased
/// exponent e of the block scale 2^(e-127) is amax * (1 / fp8_max) rounded up to a power of two,
/// so that no element needs saturating; 0 for an all-zero block, 0xff (the E8M0 NaN) for a block
/// holding inf or NaN.
MIXPREC_HOST_DEVICE inline std::uint8_t mx_block_exponent(float amax, Fp8Format format) {
  if (is_nonfinite(amax)) return 0xffu;
  const float value = amax * (1.0f / fp8_max(format));
  if (value == 0.0f) return 0;
  const std::uint32_t bits = float_to_bits(value);
  std::uint32_t exponent = bits >> 23;
  const std::uint32_t mantissa = bits & 0x7fffffu;
  // Round up; a subnormal value up to 2^-127 stays at exponent 0, and 2^127 is the largest.
  if (mantissa > 0 && exponent != 0xfeu && !(exponent == 0 && mantissa <= 0x400000u)) ++exponent;
  return static_cast<std::uint8_t>(exponent);
}

/// 2^(e - 127), the value of an E8M0 byte e (NaN for 0xff); exact, 2^-127 included.
MIXPREC_HOST_DEVICE inline float e8m0_to_float(std::uint8_t e) {
  if (e == 0xffu) return bits_to_float(0x7fc00000u);
  if (e == 0) return bits_to_float(0x00400000u);  // 2^-127, a float subnormal
  return bits_to_float(static_cast<std::uint32_t>(e) << 23);
}

/// 2^(127 - e), what an element of an MX block with exponent e is multiplied by before its cast
/// (NaN for 0xff); exact.
MIXPREC_HOST_DEVICE inline float e8m0_to_inverse(std::uint8_t e) {
  if (e == 0xffu) return bits_to_float(0x7fc00000u);
  if (e == 0xfeu) return bits_to_float(0x00400000u);  // 2^-127
  return bits_to_float(static_cast<std::uint32_t>(254 - e) << 23);
}

// ---- Element conversions ------------------------------------------------------------------------

/// Rounds a float to `format`'s bits, to nearest even, saturating: finite values beyond fp8_max
/// and +-inf become +-fp8_max; NaN becomes the format's NaN with the input's sign (0x7f / 0xff).
/// For |v| <= fp8_max this is PyTorch's float -> float8 cast (c10::Float8_e4m3fn, _e5m2), which
/// does not saturate by itself: quantize = this(float(x) * scale) is bit for bit
/// x.to(kFloat).mul(scale).clamp(-max, max).to(fp8_dtype).
MIXPREC_HOST_DEVICE inline std::uint8_t float_to_fp8_bits(float v, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const int mantissa_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const std::uint32_t x = float_to_bits(v);
  const std::uint32_t sign = (x >> 24) & 0x80u;
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7fu);  // NaN
  const std::uint32_t max_bits = e4m3 ? 0x7eu : 0x7bu;
  if (a >= float_to_bits(fp8_max(format))) return static_cast<std::uint8_t>(sign | max_bits);
  // Below the format's smallest normal, 2^(1 - bias), the step is the subnormal unit
  // 2^(1 - bias - mantissa_bits): |v| / unit is exact in float and rounded to an integer.
  const std::uint32_t min_normal = static_cast<std::uint32_t>(127 + 1 - bias) << 23;
  std::uint32_t out;
  if (a < min_normal) {
    // |v| / unit < 2^mantissa_bits, exactly representable with its fraction; round half to even.
    const float unit_inverse = bits_to_float(static_cast<std::uint32_t>(127 - 1 + bias +
                                                                        mantissa_bits) << 23);
    const float scaled = bits_to_float(a) * unit_inverse;  // exact: a power-of-two multiply
    // Adding 2^23 rounds to an integer, to nearest even, in the FPU's default mode.
    const float rounded = (scaled + 8388608.0f) - 8388608.0f;
    out = static_cast<std::uint32_t>(rounded);  // may be 2^mantissa_bits: the smallest normal
  } else {
    const int shift = 23 - mantissa_bits;
    const std::uint32_t odd = (a >> shift) & 1u;
    const std::uint32_t rebiased = a - (static_cast<std::uint32_t>(127 - bias) << 23);
    out = (rebiased + ((1u << (shift - 1)) - 1u) + odd) >> shift;
    if (out > max_bits) out = max_bits;  // cannot happen below fp8_max; kept as a guard
  }
  return static_cast<std::uint8_t>(sign | out);
}

/// The exact float value of `format`'s bits (E4M3: 0x7f/0xff are NaN; E5M2: IEEE inf and NaN).
MIXPREC_HOST_DEVICE inline float fp8_bits_to_float(std::uint8_t b, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const int mantissa_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t magnitude = b & 0x7fu;
  const std::uint32_t exponent = magnitude >> mantissa_bits;
  const std::uint32_t mantissa = magnitude & ((1u << mantissa_bits) - 1u);
  if (e4m3 && magnitude == 0x7fu) return bits_to_float(sign | 0x7fc00000u);
  if (!e4m3 && exponent == 0x1fu) {
    return bits_to_float(sign | (mantissa == 0 ? 0x7f800000u : 0x7fc00000u));
  }
  if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^(1 - bias - mantissa_bits), exact in float.
    const float unit =
        bits_to_float(static_cast<std::uint32_t>(127 + 1 - bias - mantissa_bits) << 23);
    return bits_to_float(sign | float_to_bits(static_cast<float>(mantissa) * unit));
  }
  return bits_to_float(sign | ((exponent + 127u - static_cast<std::uint32_t>(bias)) << 23) |
                       (mantissa << (23 - mantissa_bits)));
}

// ---- Kernels (the dispatch point: src/core/kernels.cpp) ----------------------------------------
// Every pointer lives on the device of the tensor views (CPU memory, or CUDA device memory); on
// CUDA the work is queued on `stream` (a cudaStream_t; nullptr: the default stream) and nothing
// waits for it. Input views may be float32, float64, float16 or bfloat16; element order is the
// views', which must be contiguous (the MX calls read rows of `cols` elements).

/// *amax = max(*amax, max |x|) over x's elements: with kPropagate a NaN element makes it NaN (as
/// x.abs().max()), with kIgnore NaN elements are skipped (TE's fmaxf). A NaN already in *amax
/// stays under both (TE's atomic max keeps it too). It accumulates, so several casts of one
/// iteration record into one slot: set *amax to 0 first.
void amax_(const TensorView& x, float* amax, void* stream = nullptr,
           NanAmax nan = NanAmax::kPropagate);

/// Quantizes with a per-tensor scale: q[i] = float_to_fp8_bits(float(x[i]) * *scale, format).
/// When `amax` is not null it also records max |x| (before scaling) into *amax as amax_() does
/// with `nan`, in the same pass over x: the fused amax-and-quantize of delayed scaling. q holds
/// x.numel bytes.
void quantize_fp8_(const TensorView& x, std::uint8_t* q, Fp8Format format, const float* scale,
                   float* amax = nullptr, void* stream = nullptr,
                   NanAmax nan = NanAmax::kPropagate);

/// Current scaling in one call: *amax = max |x| (overwritten, not accumulated; NaN elements as
/// rule.nan says), then *scale =
/// current_scale(*amax, fp8_max(format), rule), *scale_inv = 1 / *scale, and q quantized with
/// *scale. Two reads of x, no host synchronisation on CUDA.
void quantize_fp8_current_(const TensorView& x, std::uint8_t* q, Fp8Format format,
                           const CurrentScaling& rule, float* scale, float* scale_inv, float* amax,
                           void* stream = nullptr);

/// Dequantizes: out[i] = out.dtype(fp8_bits_to_float(q[i]) * *scale_inv), rounded to nearest even
/// ((q.to(kFloat) * scale_inv).to(out_dtype)). q holds out.numel bytes.
void dequantize_fp8_(const std::uint8_t* q, Fp8Format format, const float* scale_inv,
                     const TensorView& out, void* stream = nullptr);

/// MXFP8 block quantize: x is read as rows of `cols` elements (x.numel a multiple of cols), each
/// row cut into blocks of 32 (the last one of a row may be shorter). Per block, e =
/// mx_block_exponent(block amax, format) goes to scales[row * ceil(cols / 32) + block], and each
/// element to q as float_to_fp8_bits(float(x) * e8m0_to_inverse(e), format). A block holding inf
/// or NaN (e = 0xff) is all NaN: every code is 0x7f (the sign of NaN * x is left open by IEEE 754).
/// With NanAmax::kIgnore (TE) the block amax skips NaN elements: a block whose other elements are
/// finite gets their exponent, and its NaN elements the format's NaN with their sign, as
/// float_to_fp8_bits gives; a block of NaNs only has amax 0 (e = 0). Inf still gives 0xff.
void quantize_mxfp8_(const TensorView& x, std::int64_t cols, std::uint8_t* q,
                     std::uint8_t* scales, Fp8Format format, void* stream = nullptr,
                     NanAmax nan = NanAmax::kPropagate);

/// MXFP8 dequantize: out[i] = out.dtype(fp8_bits_to_float(q[i]) * e8m0_to_float(scale of i's
/// block)), with the block layout of quantize_mxfp8_; every element of a 0xff block is NaN.
void dequantize_mxfp8_(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                       Fp8Format format, const TensorView& out, void* stream = nullptr);

/// Tile scaling, the current rule per tile: x is read as rows of `cols` elements (x.numel a
/// multiple of cols) and cut into tiles of tile_rows x tile_cols (those at the bottom and right
/// edges may be smaller), numbered row-major: tile (i, j) is number i * ceil(cols / tile_cols) +
/// j. Per tile: scale = current_scale(tile amax, fp8_max(format), rule) (NaN elements as rule.nan
/// says), scale_inv[tile] = 1 / scale, and each element q = float_to_fp8_bits(float(x) * scale).
/// torchao's rowwise recipe is tiles of 1 x cols; TE's Float8BlockScaling is 1 x 128 for
/// activations and gradients and 128 x 128 for weights (with eps 0).
void quantize_fp8_tiles_(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                         std::int64_t tile_cols, std::uint8_t* q, float* scale_inv,
                         Fp8Format format, const CurrentScaling& rule, void* stream = nullptr);

/// Tile dequantize: out[i] = out.dtype(fp8_bits_to_float(q[i]) * scale_inv[tile of i]), with the
/// tiles of quantize_fp8_tiles_.
void dequantize_fp8_tiles_(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                           std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                           const TensorView& out, void* stream = nullptr);

/// One tensor's delayed-scaling state, all on one device: its amax history (history_len slots,
/// `stride` floats apart; slot 0 holds this iteration's amax, as TE's amax_history[0]), its
/// scale and scale_inv (one float each) and its format.
struct DelayedTensor {
  float* amax_history = nullptr;
  std::int64_t stride = 1;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  Fp8Format format = Fp8Format::kE4M3;
};

/// The delayed rule's batched update, once per iteration, for the tensors cast since the last
/// update (pass only those: a tensor that was not cast keeps its history unrolled, unlike TE
/// before PR #825), as TE's fused kernel (recipe/delayed_scaling.cu, kernel_bulk) does it. For
/// each: a tensor whose slot 0 is 0 (cast, but only zeros) is left as it is: no roll, the same
/// scale and scale_inv. Else amax = max of the history (kMax; NaN slots skipped under
/// NanAmax::kIgnore, as fmaxf, or making it NaN under kPropagate) or slot 0 (kMostRecent); *scale
/// = delayed_scale(amax, *scale, fp8_max(format), margin); *scale_inv = 1 / *scale; then the
/// history rolls as TE's (slot i takes slot i+1, the last slot takes slot 0) and slot 0 is zeroed.
/// All tensors on `device`; on CUDA one launch per 96 tensors, none of them synchronising.
void delayed_scaling_update_(const DelayedTensor* tensors, std::size_t count,
                             const DelayedScaling& rule, Device device = {},
                             void* stream = nullptr);

}  // namespace mixprec::core
