// mixprec::fp4: 4-bit quantize and dequantize of LibTorch tensors (>= 2.1, for NVFP4's float8
// block scales): NVFP4 with Transformer Engine's rules, MXFP4 with torchao's, the functional ops
// of api.md. The rules and the kernels are the core's (mixprec/core/fp4.h); docs/fp4.md has the
// layouts, the formulas with their sources, and where mixprec differs from torchao.
#pragma once

#include <ATen/core/Tensor.h>

#include "mixprec/core/fp4.h"
#include "mixprec/torch_version.h"

#if !MIXPREC_TORCH_FP8
#error \
    "mixprec/fp4.h needs LibTorch >= 2.1 (float8 dtypes); this LibTorch has none, and mixprec \
was built without its FP4 LibTorch part (its core FP4 kernels, mixprec/core/fp4.h, still work)."
#endif

namespace mixprec::fp4 {

// Layout: E2M1 elements two a byte, the even index in the low nibble; blocks run along the last
// dimension, whose size K must be a multiple of the block size (NVFP4 16, MXFP4 32).

/// The dtype of the packed E2M1 data the quantize ops return: at::kFloat4_e2m1fn_x2 where
/// LibTorch has it (>= 2.8), else at::kByte. The dequantize ops take either.
#if MIXPREC_TORCH_FLOAT4
inline constexpr at::ScalarType kPackedDtype = at::kFloat4_e2m1fn_x2;
#else
inline constexpr at::ScalarType kPackedDtype = at::kByte;
#endif

/// An NVFP4 tensor (TE's NVFP4BlockScaling): E2M1 elements, one E4M3 scale per block of 16
/// elements along the last dimension, and a per-tensor fp32 amax.
struct Nvfp4Tensor {
  at::Tensor data;          ///< [..., K/2] packed E2M1 (kPackedDtype)
  at::Tensor block_scales;  ///< [..., K/16] float8_e4m3fn (two_d: the 16 rows of a tile repeat it)
  at::Tensor amax;          ///< [1] float32: max |x| with NaN skipped (S_enc = 2688 / amax)
};

/// NVFP4 quantize with TE >= 2.14's rules, round to nearest even: amax = max |x| (NaN skipped),
/// S_enc = 2688 / amax, per block s_b = e4m3(amax_b * S_enc / 6) and q = e2m1(x / (s_b / S_enc))
/// (docs/fp4.md has the exact order of operations). two_d: one scale per 16 x 16 tile of each
/// matrix of the last two dimensions (TE's weights), the second-to-last a multiple of 16. x:
/// float32, bfloat16 or float16 of at least one dimension, any strides; CPU or CUDA (the current
/// stream, no sync).
Nvfp4Tensor quantize_nvfp4(const at::Tensor& x, bool two_d = false);

/// Each element times its block's decode scale fl(s_b * amax / 2688), rounded to out_dtype
/// (float32, bfloat16 or float16), of shape [..., K]. q.data may be uint8 or float4_e2m1fn_x2.
at::Tensor dequantize_nvfp4(const Nvfp4Tensor& q, at::ScalarType out_dtype);

/// How an MXFP4 block's E8M0 scale is chosen (torchao's ScaleCalculationMode): kFloor
/// (floor(log2 amax) - 2, torchao's default and OCP's) or kRceil (ceil(log2(amax / 6))).
using MxScaleMode = core::MxScaleMode;

/// An MXFP4 tensor (OCP MX v1.0, torchao's to_mx): E2M1 elements and one E8M0 scale per block of
/// 32 elements along the last dimension.
struct Mxfp4Tensor {
  at::Tensor data;    ///< [..., K/2] packed E2M1 (kPackedDtype)
  at::Tensor scales;  ///< [..., K/32] uint8: torchao's float8_e8m0fnu bytes, 2^(e - 127), 255 NaN
};

/// MXFP4 quantize as torchao 0.18's to_mx(x, float4_e2m1fn_x2, 32, mode): per block the exponent
/// e from its amax (NaN propagates: e = 255) and q = e2m1(x / 2^(e - 127)), round to nearest even,
/// saturating at 6. x: float32, bfloat16 or float16 of at least one dimension, any strides; CPU or
/// CUDA (the current stream, no sync).
Mxfp4Tensor quantize_mxfp4(const at::Tensor& x, MxScaleMode mode = MxScaleMode::kFloor);

/// Each element times its block's 2^(e - 127) (NaN for e = 255), rounded to out_dtype (float32,
/// bfloat16 or float16), of shape [..., K]. q.data may be uint8 or float4_e2m1fn_x2.
at::Tensor dequantize_mxfp4(const Mxfp4Tensor& q, at::ScalarType out_dtype);

}  // namespace mixprec::fp4
