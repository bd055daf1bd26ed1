// 4-bit scaling in the framework-free core: the E2M1 element format, the NVFP4 rules (Transformer
// Engine >= 2.14: E4M3 block scales of 16 elements under a per-tensor fp32 scale) and the MXFP4
// rules (torchao 0.18's to_mx: E8M0 scales of 32 elements, FLOOR or RCEIL), as host/device
// functions, and the FP4 kernels on raw buffers. The kernels are part of mixprec's one kernel
// dispatch point (src/core/kernels_fp4.cpp). docs/fp4.md gives the formulas with their sources.
//
// Layout: two E2M1 codes a byte, the even element in the low nibble (PyTorch's float4_e2m1fn_x2,
// torchao's pack_uint4, TE's kernels). Blocks run along rows of `cols` elements.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/core/fp8.h"
#include "mixprec/core/half.h"
#include "mixprec/core/macros.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

inline constexpr float kE2m1Max = 6.0f;            ///< the largest E2M1 value
inline constexpr float kNvfp4Max = 2688.0f;        ///< 6 * 448: E2M1 max times E4M3 max
inline constexpr std::int64_t kNvfp4Block = 16;    ///< elements per NVFP4 block (and tile side)
inline constexpr std::int64_t kMxfp4Block = 32;    ///< elements per MXFP4 block
inline constexpr float kFltMax = 3.40282347e+38f;  ///< FLT_MAX, for device code

// ---- E2M1 ---------------------------------------------------------------------------------------

/// The E2M1 magnitude code (0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6) of a |value| `a` that is not NaN,
/// rounded to nearest even and saturating at 6 (inf included): each comparison is one rounding
/// boundary, a tie going to the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
/// 3.5 -> 4, 5 -> 4). Branch-free, so that the CPU loops vectorize.
MIXPREC_HOST_DEVICE inline std::uint32_t e2m1_magnitude(float a) {
  return static_cast<std::uint32_t>(a > 0.25f) + static_cast<std::uint32_t>(a >= 0.75f) +
         static_cast<std::uint32_t>(a > 1.25f) + static_cast<std::uint32_t>(a >= 1.75f) +
         static_cast<std::uint32_t>(a > 2.5f) + static_cast<std::uint32_t>(a >= 3.5f) +
         static_cast<std::uint32_t>(a > 5.0f);
}

/// Rounds a float to an E2M1 code (low nibble), to nearest even, saturating: +-inf and values
/// beyond 6 become +-6. The sign is kept, -0 included (0x8), as TE's kernels, torchao and
/// ml_dtypes do. Every NaN (quiet, signalling, either sign) becomes 0x7 (+6), as TE's cvt.satfinite
/// does; torchao's code for NaN depends on its payload and ml_dtypes gives a zero, see docs/fp4.md.
MIXPREC_HOST_DEVICE inline std::uint8_t float_to_e2m1(float v) {
  const std::uint32_t bits = float_to_bits(v);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0x7u;
  return static_cast<std::uint8_t>(((bits >> 28) & 0x8u) | e2m1_magnitude(bits_to_float(magnitude)));
}

/// The exact value of an E2M1 code (its low nibble; the high one is ignored).
MIXPREC_HOST_DEVICE inline float e2m1_to_float(std::uint8_t code) {
  // Codes 0-3 are 0, 0.5, 1, 1.5 (mantissa / 2); 4-7 are 2, 3, 4, 6 (2^(e-1) * (1 + m / 2)).
  const std::uint32_t magnitude = code & 0x7u;
  const std::uint32_t exponent = magnitude >> 1;
  const float value = exponent == 0 ? 0.5f * static_cast<float>(magnitude & 1u)
                                    : bits_to_float((126u + exponent) << 23) *
                                          (1.0f + 0.5f * static_cast<float>(magnitude & 1u));
  return bits_to_float(float_to_bits(value) | (static_cast<std::uint32_t>(code & 0x8u) << 28));
}

/// Stochastic rounding to E2M1 with 8 random bits (`random8`, 0..255; the high bits are ignored),
/// TE's software rounder (common/util/ptx.cuh): with u = random8 / 256 and `step` the spacing of
/// the E2M1 values around |v| (0.5 below 2, 1 below 4, 2 below 6), the magnitude is
/// min(floor((|v| + u * step) / step) * step, 6) with v's sign. mixprec evaluates it exactly
/// (|v| / step split into whole and fraction, the fraction compared with 1 - u), so the CPU and
/// the CUDA kernels give the same bits for the same random8. It rounds up for floor(256 * frac)
/// of the 256 bytes (frac = the distance to the value below, in steps): unbiased to within step /
/// 256, low. NaN gives 0x7, as
/// float_to_e2m1, and |v| >= 6 (inf included) gives +-6.
MIXPREC_HOST_DEVICE inline std::uint8_t float_to_e2m1_stochastic(float v, std::uint32_t random8) {
  const std::uint32_t bits = float_to_bits(v);
  const std::uint32_t sign = (bits >> 28) & 0x8u;
  const std::uint32_t magnitude_bits = bits & 0x7fffffffu;
  if (magnitude_bits > 0x7f800000u) return 0x7u;
  const float a = bits_to_float(magnitude_bits);
  if (a >= kE2m1Max) return static_cast<std::uint8_t>(sign | 0x7u);
  // k = a / step, exact (a power-of-two multiply); its whole part n indexes the values of the
  // binade: codes n (step 0.5), n + 2 (step 1) or n + 4 (step 2).
  const float k = a < 2.0f ? a * 2.0f : (a < 4.0f ? a : a * 0.5f);
  const std::uint32_t code_base = a < 2.0f ? 0u : (a < 4.0f ? 2u : 4u);
  const auto n = static_cast<std::uint32_t>(k);     // k < 4: truncation is floor
  const float fraction = k - static_cast<float>(n);  // exact (Sterbenz)
  // Up when fraction + u >= 1, i.e. 256 * fraction >= 256 - random8: both sides exact floats.
  const std::uint32_t r = random8 & 0xffu;
  const std::uint32_t up = static_cast<std::uint32_t>(fraction * 256.0f >= static_cast<float>(256u - r));
  return static_cast<std::uint8_t>(sign | (code_base + n + up));
}

// ---- NVFP4 (TE >= 2.14: common/cast/nvfp4/core_nvfp4.cuh, custom_recipes/reference_nvfp4.py) ----

/// fminf(v, FLT_MAX): the finite cap TE puts on its scales (a NaN v gives FLT_MAX, as fminf).
MIXPREC_HOST_DEVICE inline float min_flt_max(float v) { return v < kFltMax ? v : kFltMax; }

/// The per-tensor encode scale S_enc of a tensor of this amax: min(fl(2688 / amax), FLT_MAX), and 1
/// when amax is 0 or S_enc rounds to 0 (amax inf). S_dec is fl(1 / S_enc).
MIXPREC_HOST_DEVICE inline float nvfp4_encode_scale(float amax) {
  const float s = min_flt_max(kNvfp4Max / amax);
  return (amax == 0.0f || s == 0.0f) ? 1.0f : s;
}

/// A block's E4M3 scale bits: e4m3(min(block_amax * fl(S_enc * fl(1/6)), FLT_MAX)), rounded to
/// nearest even and saturating at 448 (TE >= 2.14's order of operations, PR #2555; TE 2.8-2.13
/// computed fl(fl(block_amax / 6) * S_enc), which differs on ties).
MIXPREC_HOST_DEVICE inline std::uint8_t nvfp4_block_scale(float block_amax, float encode_scale) {
  const float factor = encode_scale * (1.0f / 6.0f);
  return float_to_fp8_bits(min_flt_max(block_amax * factor), Fp8Format::kE4M3);
}

/// What a block's elements are multiplied by before their E2M1 cast: min(fl(1 / fl(s_b * S_dec)),
/// FLT_MAX). A block whose scale rounded to 0 gets FLT_MAX, so its nonzero elements become +-6
/// (TE's codes), which dequantize to 0.
MIXPREC_HOST_DEVICE inline float nvfp4_block_encode(std::uint8_t block_scale, float decode_scale) {
  return min_flt_max(1.0f / (fp8_bits_to_float(block_scale, Fp8Format::kE4M3) * decode_scale));
}

/// What a block's E2M1 values are multiplied by to dequantize: fl(fl(s_b * amax) * fl(1/2688))
/// (TE's dequantize_nvfp4.cuh).
MIXPREC_HOST_DEVICE inline float nvfp4_block_decode(std::uint8_t block_scale, float amax) {
  return (fp8_bits_to_float(block_scale, Fp8Format::kE4M3) * amax) * (1.0f / kNvfp4Max);
}

// ---- MXFP4 (torchao 0.18 to_mx(x, float4_e2m1fn_x2, 32, mode); OCP MX v1.0) -------------------

/// How an MXFP4 block's E8M0 exponent is chosen, as torchao's ScaleCalculationMode.
enum class MxScaleMode : std::uint8_t {
  kFloor,  ///< torchao's default and the OCP spec's: floor(log2 amax) - 2, from the exponent bits
  kRceil,  ///< ceil(log2(amax / 6)) (NVIDIA's cvt.rp.ue8m0): no element needs saturating
};

/// The biased E8M0 exponent of an MXFP4 block of this amax (NaN: 255). kFloor: the exponent bits
/// of amax minus 2 (6's power of two), clamped to [-127, 128] then biased: a subnormal amax gives
/// 0, inf 253. kRceil: ceil(log2(fl(amax / 6))) computed exactly (torchao's float32 log2 is one too
/// low just above some powers of two), clamped to [-127, 127] then biased: 0 for an all-zero
/// block, 254 for inf.
MIXPREC_HOST_DEVICE inline std::uint8_t mxfp4_block_exponent(float amax, MxScaleMode mode) {
  const std::uint32_t bits = float_to_bits(amax) & 0x7fffffffu;
  if (bits > 0x7f800000u) return 0xffu;
  if (mode == MxScaleMode::kFloor) {
    const int unbiased = static_cast<int>(bits >> 23) - 127 - 2;
    return static_cast<std::uint8_t>((unbiased < -127 ? -127 : unbiased) + 127);  // <= 126 + 127
  }
  if (bits == 0x7f800000u) return 0xfeu;
  const std::uint32_t d = float_to_bits(bits_to_float(bits) / kE2m1Max);
  if (d == 0) return 0;
  int e;  // ceil(log2 d)
  if ((d >> 23) == 0) {
    e = d > 0x00400000u ? -126 : -127;  // subnormal d: above 2^-127 rounds up to 2^-126
  } else {
    e = static_cast<int>(d >> 23) - 127 + ((d & 0x7fffffu) != 0 ? 1 : 0);
  }
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return static_cast<std::uint8_t>(e + 127);
}

/// What an element of an MXFP4 block with exponent `e` is multiplied by before its E2M1 cast:
/// 2^(127 - e), which is torchao's x / 2^(e - 127) (FLOOR) and x * 2^(127 - e) (RCEIL), except that
/// torchao treats e = 0 specially: FLOOR divides by 2^-126 (its clamp to the smallest normal), RCEIL
/// multiplies by 1. e = 255 gives NaN: every element of such a block is code 0x7.
MIXPREC_HOST_DEVICE inline float mxfp4_element_multiplier(std::uint8_t e, MxScaleMode mode) {
  if (e == 0xffu) return bits_to_float(0x7fc00000u);
  if (e == 0) return mode == MxScaleMode::kFloor ? bits_to_float(253u << 23) : 1.0f;  // 2^126
  return e8m0_to_inverse(e);
}

// ---- Kernels (the dispatch point: src/core/kernels_fp4.cpp) -------------------------------------
// Every pointer lives on the device of the views (CPU memory or CUDA device memory); on CUDA the
// work is queued on `stream` (a cudaStream_t; nullptr: the default stream) and nothing waits for
// it. x may be float32, float64 (rounded to float32 first), float16 or bfloat16, contiguous, read
// as rows of `cols` elements (x.numel a multiple of cols). q holds x.numel / 2 bytes. No
// flush-to-zero: subnormal scales and elements are IEEE's.

/// How quantize_nvfp4_ rounds and tiles.
struct Nvfp4Options {
  /// 16 x 16 tiles (16 consecutive rows by 16 columns) share one scale, TE's 2D weight scaling;
  /// the row count must be a multiple of 16. block_scales still holds one byte per row and block:
  /// the 16 rows of a tile repeat its scale.
  bool two_d = false;
  /// Stochastic rounding (float_to_e2m1_stochastic) with bits from Philox4x32-10 (Random123):
  /// key = seed, counter = {i / 16 (64 bits), offset (64 bits)} for element i of x, whose random
  /// byte is byte i % 16 of the 128-bit output (little-endian words). The same seed and offset
  /// give the same codes on the CPU and CUDA; a training loop moves `offset` on each call.
  bool stochastic = false;
  std::uint64_t seed = 0;    ///< Philox key
  std::uint64_t offset = 0;  ///< the counter's high 64 bits
};

/// NVFP4 quantize with TE's rules, given the per-tensor amax (*amax: max |x| with NaN skipped,
/// from amax_(x, amax, stream, NanAmax::kIgnore)). cols must be a multiple of 16. Per block b of 16
/// elements of a row (or 16 x 16 tile): block_scales[b] = nvfp4_block_scale(amax_b, S_enc) with
/// amax_b skipping NaN, and each element q = float_to_e2m1(fl(x * nvfp4_block_encode(s_b,
/// S_dec))) (or its stochastic rounding). block_scales holds x.numel / 16 bytes.
void quantize_nvfp4_(const TensorView& x, std::int64_t cols, const float* amax, std::uint8_t* q,
                     std::uint8_t* block_scales, const Nvfp4Options& options = {},
                     void* stream = nullptr);

/// NVFP4 dequantize: out[i] = out.dtype(fl(e2m1_to_float(code i) * nvfp4_block_decode(s_b,
/// *amax))), with the block layout of quantize_nvfp4_ (1D or 2D alike). cols: a multiple of 16.
void dequantize_nvfp4_(const std::uint8_t* q, const std::uint8_t* block_scales, const float* amax,
                       std::int64_t cols, const TensorView& out, void* stream = nullptr);

/// MXFP4 quantize as torchao's to_mx: per block of 32 elements of a row (cols a multiple of 32),
/// e = mxfp4_block_exponent(block amax, mode) with NaN propagating (scales: x.numel / 32 bytes),
/// and q = float_to_e2m1(fl(x * mxfp4_element_multiplier(e, mode))).
void quantize_mxfp4_(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                     MxScaleMode mode = MxScaleMode::kFloor, void* stream = nullptr);

/// MXFP4 dequantize: out[i] = out.dtype(fl(e2m1_to_float(code i) * e8m0_to_float(e))); every
/// element of a block with e = 255 is NaN.
void dequantize_mxfp4_(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                       const TensorView& out, void* stream = nullptr);

/// The 16-point random Hadamard transform of TE's NVFP4 recipe (pytorch/tensor/nvfp4_tensor.py)
/// on each run of 16 consecutive elements of x (x.numel a multiple of 16): y = (x * s) H16 / 4
/// with the fixed signs kRhtSigns and Sylvester's H16 (H_ij = (-1)^popcount(i & j)). Each x is
/// first rounded to bfloat16 (TE's input), the sums are float32 in the butterfly order of a fast
/// Walsh-Hadamard transform (4 stages), then times 1/4 and rounded to bfloat16 (out: x.numel
/// bfloat16 bit patterns).
void hadamard16_(const TensorView& x, std::uint16_t* out, void* stream = nullptr);

/// The RHT's sign vector, TE's: s_i = -1 where bit i is set.
inline constexpr std::uint32_t kRhtSignBits = 0xd7e8u;  // 1,1,1,-1,1,-1,-1,-1,-1,-1,-1,1,-1,1,-1,-1

}  // namespace mixprec::core
