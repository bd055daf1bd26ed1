// CUDA backend of the core kernels (internal; called only from src/core/kernels.cpp).
// Host functions: they launch on the given stream and never synchronise with the host.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/core/clip_kernels.h"
#include "mixprec/core/fp4.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/optim_kernels.h"
#include "mixprec/core/scale_policy.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cuda {

/// Multi-tensor unscale-and-check on the current device: every view (device memory) is cut into
/// chunks and many chunks of many tensors go into one launch. inv_scale and found_inf are device
/// pointers. Throws core::Error when a launch fails.
void non_finite_check_and_unscale(const TensorView* grads, std::size_t count, float* found_inf,
                                  const float* inv_scale, void* stream);

/// update_scale_state() in a one-thread kernel on `stream` (all pointers are device memory).
void update_scale(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                  const ScalePolicy& policy, void* stream, std::int64_t* counters,
                  double* history, std::int64_t history_capacity);

/// core::fused_sgd_ on the current device: multi-tensor launches on `stream` that skip on a
/// non-zero *found_inf (device memory, may be null) and read *grad_scale (may be null) on the
/// device, then a launch that advances the step counts of applied steps.
void fused_sgd(const SgdTensors* params, std::size_t count, const SgdHyper& hyper,
               const float* grad_scale, const float* found_inf, void* stream,
               const float* clip_coef);

/// core::fused_adam_ on the current device, likewise.
void fused_adam(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                const float* grad_scale, const float* found_inf, void* stream,
                const float* clip_coef);

/// core::grad_norm_ on the current device (Note [The CUDA clip norm] in clip.cu): per-chunk
/// partial sums in double, combined in a fixed order by a last one-block kernel; every pointer
/// is device memory and nothing waits for the host.
void grad_norm(const TensorView* grads, std::size_t count, NormKind kind, const float* inv_scale,
               double* out, float* found_inf, double* per_view, void* stream);

/// core::unscale_and_clip_ on the current device: one multi-tensor pass.
void unscale_and_clip(const TensorView* grads, std::size_t count, const float* inv_scale,
                      const float* coef, void* stream);

// FP8 (src/cuda/fp8.cu): core::amax_, quantize_fp8_, quantize_fp8_current_, dequantize_fp8_,
// quantize_mxfp8_, dequantize_mxfp8_, the tile kernels and
// delayed_scaling_update_ on the current device, queued on `stream`; every pointer is device
// memory, except `tensors` of delayed_scaling_update (host memory, the pointers in it device
// memory).
void amax(const TensorView& x, float* amax, NanAmax nan, void* stream);
void quantize_fp8(const TensorView& x, std::uint8_t* q, Fp8Format format, const float* scale,
                  float* amax, NanAmax nan, void* stream);
void quantize_fp8_current(const TensorView& x, std::uint8_t* q, Fp8Format format,
                          const CurrentScaling& rule, float* scale, float* scale_inv, float* amax,
                          void* stream);
void dequantize_fp8(const std::uint8_t* q, Fp8Format format, const float* scale_inv,
                    const TensorView& out, void* stream);
void quantize_mxfp8(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                    Fp8Format format, NanAmax nan, void* stream);
void dequantize_mxfp8(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                      Fp8Format format, const TensorView& out, void* stream);
void quantize_fp8_tiles(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                        std::int64_t tile_cols, std::uint8_t* q, float* scale_inv,
                        Fp8Format format, const CurrentScaling& rule, void* stream);
void dequantize_fp8_tiles(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                          std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                          const TensorView& out, void* stream);
void delayed_scaling_update(const DelayedTensor* tensors, std::size_t count,
                            const DelayedScaling& rule, void* stream);

// FP4 (src/cuda/fp4.cu): core::quantize_nvfp4_, dequantize_nvfp4_, quantize_mxfp4_,
// dequantize_mxfp4_ and hadamard16_ on the current device, queued on `stream`; every pointer is
// device memory (amax too: the kernels read it there).
void quantize_nvfp4(const TensorView& x, std::int64_t cols, const float* amax, std::uint8_t* q,
                    std::uint8_t* block_scales, const Nvfp4Options& options, void* stream);
void dequantize_nvfp4(const std::uint8_t* q, const std::uint8_t* block_scales, const float* amax,
                      std::int64_t cols, const TensorView& out, void* stream);
void quantize_mxfp4(const TensorView& x, std::uint8_t* q, std::uint8_t* scales, MxScaleMode mode,
                    void* stream);
void dequantize_mxfp4(const std::uint8_t* q, const std::uint8_t* scales, const TensorView& out,
                      void* stream);
void hadamard16(const TensorView& x, std::uint16_t* out, void* stream);

/// Number of CUDA devices visible (0 when there is no driver or device); never throws.
int device_count();

}  // namespace mixprec::core::cuda
