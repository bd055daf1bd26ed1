// CUDA kernels of the core's FP8 scaling (include/mixprec/core/fp8.h; the dispatch point,
// src/core/kernels_fp8.cpp, checks the arguments and sets the device): amax, per-tensor quantize
// (with the fused amax of delayed scaling), current scaling in two launches that never wait for
// the host, dequantize, MXFP8 block quantize and dequantize, tile scaling (rowwise, 1x128,
// 128x128), and the batched delayed-scaling update. Each thread's work is fp8_elements.cuh's
// host/device code over fp8.h's element functions, so the CUDA kernels give the CPU kernels' bits
// (tests/cuda/fp8_element_test.cpp and cuda_fp8_test.cpp run it on the host; cuda_fp8_test.cpp
// and tests/gpu/fp8_cuda_test.cpp run the kernels).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/fp8_ops.h"
#include "cuda/fp8_elements.cuh"
#include "cuda/kernels.h"
#include "cuda/multi_tensor.cuh"  // check()
#include "mixprec/core/error.h"

// No fast math here: nvcc defines no macro for --use_fast_math (nor __CUDA_FTZ for it, checked
// with nvcc 13), so CMakeLists.txt appends IEEE flags after the user's (MIXPREC_CUDA_IEEE_FLAGS),
// and the test cuda.ieee_arithmetic_under_fast_math checks the PTX of this file too.

namespace mixprec::core::cuda {
namespace {

constexpr int kFp8Threads = 256;  // per block: 8 warps
constexpr int kWarps = kFp8Threads / 32;
// Grid-stride kernels use at most this many blocks (enough to fill an H200's 132 SMs eight deep);
// an amax kernel then makes at most this many atomics.
constexpr std::int64_t kMaxBlocks = 1024;

int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kFp8Threads - 1) / kFp8Threads;
  return static_cast<int>(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

__device__ std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ std::int64_t thread_count() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// The max of `v` over the block, in thread 0 (the other threads get partial values). Every thread
// of the block must call it.
__device__ std::uint32_t block_max(std::uint32_t v) {
  __shared__ std::uint32_t warp_max[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) {
    v = max_bits(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? warp_max[lane] : 0u;
    for (int offset = 16; offset > 0; offset /= 2) {
      v = max_bits(v, __shfl_down_sync(0xffffffffu, v, offset));
    }
  }
  return v;
}

// *amax = max(*amax, the block's abs_bits max), NaN-propagating, in thread 0.
// Note [The NaN-propagating atomic amax]
// abs_bits values are at most 0x7fffffff, so as signed ints they are non-negative and order as the
// magnitudes, every NaN above +inf; a NaN candidate is recorded as 0x7fc00000, the CPU kernels'
// NaN. atomicMax on the slot's bits as a signed int is then the NaN-propagating max of the CPU
// kernels (max_nan, src/core/fp8_ops.h) for every slot the kernels produce (0 or a positive float,
// or a quiet NaN 0x7fc00000 or above): a NaN slot stays as it is, a NaN candidate beats every
// number. A negative slot, which no kernel writes, is a negative int below every candidate: the
// candidate wins, as in the float max, except that a -0 slot becomes +0 and a negative NaN is lost.
__device__ void record_amax(float* amax, std::uint32_t block_bits) {
  if (threadIdx.x == 0) {
    atomicMax(reinterpret_cast<int*>(amax), static_cast<int>(canonical_amax_bits(block_bits)));
  }
}

template <DType kType>
__global__ void __launch_bounds__(kFp8Threads)
    amax_kernel(const typename Fp8Io<kType>::Storage* x, std::int64_t n, float* amax,
                bool skip_nan) {
  const std::uint32_t bits =
      block_max(amax_share<kType>(x, n, thread_index(), thread_count(), skip_nan));
  record_amax(amax, bits);
}

// Per-tensor quantize with *scale; with kAmax also the fused amax into *amax.
template <DType kType, Fp8Format kFormat, bool kAmax>
__global__ void __launch_bounds__(kFp8Threads)
    quantize_kernel(const typename Fp8Io<kType>::Storage* x, std::uint8_t* q, std::int64_t n,
                    const float* scale, float* amax, bool skip_nan) {
  const float s = *scale;  // every thread reads it; it hits in cache
  const std::uint32_t bits =
      quantize_share<kType, kFormat, kAmax>(x, q, n, s, thread_index(), thread_count(), skip_nan);
  if (kAmax) record_amax(amax, block_max(bits));
}

// Current scaling's second launch: the scale from *amax (complete: written by the amax kernel
// before it on the stream), computed in every thread by the one rule; one thread stores it.
template <DType kType, Fp8Format kFormat>
__global__ void __launch_bounds__(kFp8Threads)
    quantize_current_kernel(const typename Fp8Io<kType>::Storage* x, std::uint8_t* q,
                            std::int64_t n, CurrentScaling rule, const float* amax, float* scale,
                            float* scale_inv) {
  const float s = current_scale(*amax, fp8_max(kFormat), rule);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *scale = s;
    *scale_inv = 1.0f / s;
  }
  quantize_share<kType, kFormat, false>(x, q, n, s, thread_index(), thread_count());
}

template <DType kType, Fp8Format kFormat>
__global__ void __launch_bounds__(kFp8Threads)
    dequantize_kernel(const std::uint8_t* q, const float* scale_inv,
                      typename Fp8Io<kType>::Storage* out, std::int64_t n) {
  dequantize_share<kType, kFormat>(q, *scale_inv, out, n, thread_index(), thread_count());
}

// One warp per MX block, grid-stride over the blocks (the loop is warp-uniform, so every lane
// reaches every shuffle).
template <DType kType, Fp8Format kFormat>
__global__ void __launch_bounds__(kFp8Threads)
    quantize_mxfp8_kernel(const typename Fp8Io<kType>::Storage* x, std::int64_t cols,
                          std::int64_t mx_blocks, std::uint8_t* q, std::uint8_t* scales,
                          bool skip_nan) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (MxWalk walk(cols, thread_index() / 32, thread_count() / 32); walk.block() < mx_blocks;
       walk.next()) {
    const MxBlockSpan span = walk.span();
    const float v = mx_lane_load<kType>(x, span, lane);
    std::uint32_t bits = amax_candidate(v, skip_nan);
    for (int offset = 16; offset > 0; offset /= 2) {
      bits = max_bits(bits, __shfl_xor_sync(0xffffffffu, bits, offset));
    }
    mx_lane_store<kFormat>(v, bits, span, lane, q, scales + walk.block());
  }
}

// One warp per MX block, each lane one element.
template <DType kType, Fp8Format kFormat>
__global__ void __launch_bounds__(kFp8Threads)
    dequantize_mxfp8_kernel(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                            std::int64_t mx_blocks, typename Fp8Io<kType>::Storage* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (MxWalk walk(cols, thread_index() / 32, thread_count() / 32); walk.block() < mx_blocks;
       walk.next()) {
    const MxBlockSpan span = walk.span();
    if (lane < span.size) {
      const std::int64_t i = span.begin + lane;
      out[i] = mx_dequantize_element<kType, kFormat>(q[i], scales[walk.block()]);
    }
  }
}

// The delayed update: one thread per tensor of a batch (fp8_elements.cuh), each running the
// rule's one implementation (core/fp8_ops.h).
static_assert(sizeof(DelayedBatch) + sizeof(DelayedScaling) <= 4096, "kernel parameter limit");

__global__ void delayed_update_kernel(DelayedBatch batch, DelayedScaling rule) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < batch.count) delayed_update_one(batch.tensors[i], rule);
}

// Tile scaling: one block per tile (grid-stride over the tiles, block-uniform), the tile's amax
// reduced over the block, the scale of the current rule computed by thread 0 and shared, then
// the codes (each thread's share: fp8_elements.cuh, run on the host by
// tests/cuda/fp8_tiles_element_test.cpp).
template <DType kType, Fp8Format kFormat>
__global__ void __launch_bounds__(kFp8Threads)
    quantize_tiles_kernel(const typename Fp8Io<kType>::Storage* x, std::int64_t rows,
                          std::int64_t cols, std::int64_t th, std::int64_t tc, std::int64_t tiles,
                          std::uint8_t* q, float* scale_inv, CurrentScaling rule) {
  __shared__ float tile_scale_shared;
  const bool skip_nan = rule.nan == NanAmax::kIgnore;
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const TileSpan span = tile_span(t, rows, cols, th, tc);
    const std::uint32_t bits =
        block_max(tile_amax_share<kType>(x, cols, span, threadIdx.x, blockDim.x, skip_nan));
    if (threadIdx.x == 0) {
      tile_scale_shared = tile_scale<kFormat>(bits, rule);
      scale_inv[t] = 1.0f / tile_scale_shared;
    }
    __syncthreads();
    tile_quantize_share<kType, kFormat>(x, cols, span, tile_scale_shared, q, threadIdx.x,
                                        blockDim.x);
    __syncthreads();  // the shared scale and block_max's shared memory are reused by the next tile
  }
}

template <DType kType, Fp8Format kFormat>
__global__ void __launch_bounds__(kFp8Threads)
    dequantize_tiles_kernel(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                            std::int64_t th, std::int64_t tc, typename Fp8Io<kType>::Storage* out,
                            std::int64_t n) {
  const std::int64_t per_row = (cols + tc - 1) / tc;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    out[i] = tile_dequantize_element<kType, kFormat>(q, scale_inv, i, cols, th, tc, per_row);
  }
}

// Calls f(DType-tag, Format-tag) with compile-time dtype and format.
template <DType kType, typename F>
void with_format(Fp8Format format, const F& f) {
  if (format == Fp8Format::kE4M3) {
    f(std::integral_constant<DType, kType>{},
      std::integral_constant<Fp8Format, Fp8Format::kE4M3>{});
  } else {
    f(std::integral_constant<DType, kType>{},
      std::integral_constant<Fp8Format, Fp8Format::kE5M2>{});
  }
}
template <typename F>
void with_types(DType dtype, Fp8Format format, const F& f) {
  switch (dtype) {
    case DType::kFloat32:
      return with_format<DType::kFloat32>(format, f);
    case DType::kFloat64:
      return with_format<DType::kFloat64>(format, f);
    case DType::kFloat16:
      return with_format<DType::kFloat16>(format, f);
    case DType::kBFloat16:
      return with_format<DType::kBFloat16>(format, f);
  }
  MIXPREC_INTERNAL_ASSERT(false);
}

template <DType kType>
using StorageOf = typename Fp8Io<kType>::Storage;

}  // namespace

void amax(const TensorView& x, float* amax, NanAmax nan, void* stream) {
  if (x.numel == 0) return;  // max with nothing: *amax unchanged
  const auto s = static_cast<cudaStream_t>(stream);
  with_types(x.dtype, Fp8Format::kE4M3, [&](auto type, auto) {
    constexpr DType kType = decltype(type)::value;
    amax_kernel<kType><<<blocks_for(x.numel), kFp8Threads, 0, s>>>(
        static_cast<const StorageOf<kType>*>(x.data), x.numel, amax, nan == NanAmax::kIgnore);
  });
  check(cudaGetLastError(), "fp8 amax_kernel launch");
}

void quantize_fp8(const TensorView& x, std::uint8_t* q, Fp8Format format, const float* scale,
                  float* amax, NanAmax nan, void* stream) {
  if (x.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const bool skip_nan = nan == NanAmax::kIgnore;
  with_types(x.dtype, format, [&](auto type, auto fmt) {
    constexpr DType kType = decltype(type)::value;
    constexpr Fp8Format kFormat = decltype(fmt)::value;
    const auto* data = static_cast<const StorageOf<kType>*>(x.data);
    if (amax != nullptr) {
      quantize_kernel<kType, kFormat, true>
          <<<blocks_for(x.numel), kFp8Threads, 0, s>>>(data, q, x.numel, scale, amax, skip_nan);
    } else {
      quantize_kernel<kType, kFormat, false>
          <<<blocks_for(x.numel), kFp8Threads, 0, s>>>(data, q, x.numel, scale, nullptr, false);
    }
  });
  check(cudaGetLastError(), "fp8 quantize_kernel launch");
}

void quantize_fp8_current(const TensorView& x, std::uint8_t* q, Fp8Format format,
                          const CurrentScaling& rule, float* scale, float* scale_inv, float* amax,
                          void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  // *amax = max |x|, overwritten: zeroed on the stream, then accumulated by the amax kernel.
  check(cudaMemsetAsync(amax, 0, sizeof(float), s), "fp8 current scaling: cudaMemsetAsync of amax");
  cuda::amax(x, amax, rule.nan, stream);  // qualified: the parameter `amax` hides the function
  // Launched even for an empty x: it still writes the scale of amax 0.
  with_types(x.dtype, format, [&](auto type, auto fmt) {
    constexpr DType kType = decltype(type)::value;
    constexpr Fp8Format kFormat = decltype(fmt)::value;
    quantize_current_kernel<kType, kFormat><<<blocks_for(x.numel), kFp8Threads, 0, s>>>(
        static_cast<const StorageOf<kType>*>(x.data), q, x.numel, rule, amax, scale, scale_inv);
  });
  check(cudaGetLastError(), "fp8 quantize_current_kernel launch");
}

void dequantize_fp8(const std::uint8_t* q, Fp8Format format, const float* scale_inv,
                    const TensorView& out, void* stream) {
  if (out.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  with_types(out.dtype, format, [&](auto type, auto fmt) {
    constexpr DType kType = decltype(type)::value;
    constexpr Fp8Format kFormat = decltype(fmt)::value;
    dequantize_kernel<kType, kFormat><<<blocks_for(out.numel), kFp8Threads, 0, s>>>(
        q, scale_inv, static_cast<StorageOf<kType>*>(out.data), out.numel);
  });
  check(cudaGetLastError(), "fp8 dequantize_kernel launch");
}

void quantize_mxfp8(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                    Fp8Format format, NanAmax nan, void* stream) {
  if (x.numel == 0) return;
  MIXPREC_INTERNAL_ASSERT(cols > 0 && x.numel % cols == 0);
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t mx_blocks = x.numel / cols * ((cols + kMxBlock - 1) / kMxBlock);
  // A warp per MX block: 32 threads per block of 32 elements.
  const int blocks = blocks_for(mx_blocks * kMxBlock);
  with_types(x.dtype, format, [&](auto type, auto fmt) {
    constexpr DType kType = decltype(type)::value;
    constexpr Fp8Format kFormat = decltype(fmt)::value;
    quantize_mxfp8_kernel<kType, kFormat><<<blocks, kFp8Threads, 0, s>>>(
        static_cast<const StorageOf<kType>*>(x.data), cols, mx_blocks, q, scales,
        nan == NanAmax::kIgnore);
  });
  check(cudaGetLastError(), "fp8 quantize_mxfp8_kernel launch");
}

void dequantize_mxfp8(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                      Fp8Format format, const TensorView& out, void* stream) {
  if (out.numel == 0) return;
  MIXPREC_INTERNAL_ASSERT(cols > 0 && out.numel % cols == 0);
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t mx_blocks = out.numel / cols * ((cols + kMxBlock - 1) / kMxBlock);
  const int blocks = blocks_for(mx_blocks * kMxBlock);
  with_types(out.dtype, format, [&](auto type, auto fmt) {
    constexpr DType kType = decltype(type)::value;
    constexpr Fp8Format kFormat = decltype(fmt)::value;
    dequantize_mxfp8_kernel<kType, kFormat><<<blocks, kFp8Threads, 0, s>>>(
        q, scales, cols, mx_blocks, static_cast<StorageOf<kType>*>(out.data));
  });
  check(cudaGetLastError(), "fp8 dequantize_mxfp8_kernel launch");
}

void quantize_fp8_tiles(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                        std::int64_t tile_cols, std::uint8_t* q, float* scale_inv,
                        Fp8Format format, const CurrentScaling& rule, void* stream) {
  if (x.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t rows = x.numel / cols;
  const std::int64_t tiles =
      (rows + tile_rows - 1) / tile_rows * ((cols + tile_cols - 1) / tile_cols);
  const int blocks = static_cast<int>(tiles < kMaxBlocks ? tiles : kMaxBlocks);
  with_types(x.dtype, format, [&](auto type, auto fmt) {
    constexpr DType kType = decltype(type)::value;
    constexpr Fp8Format kFormat = decltype(fmt)::value;
    quantize_tiles_kernel<kType, kFormat><<<blocks, kFp8Threads, 0, s>>>(
        static_cast<const StorageOf<kType>*>(x.data), rows, cols, tile_rows, tile_cols, tiles, q,
        scale_inv, rule);
  });
  check(cudaGetLastError(), "fp8 quantize_tiles_kernel launch");
}

void dequantize_fp8_tiles(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                          std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                          const TensorView& out, void* stream) {
  if (out.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  with_types(out.dtype, format, [&](auto type, auto fmt) {
    constexpr DType kType = decltype(type)::value;
    constexpr Fp8Format kFormat = decltype(fmt)::value;
    dequantize_tiles_kernel<kType, kFormat><<<blocks_for(out.numel), kFp8Threads, 0, s>>>(
        q, scale_inv, cols, tile_rows, tile_cols, static_cast<StorageOf<kType>*>(out.data),
        out.numel);
  });
  check(cudaGetLastError(), "fp8 dequantize_tiles_kernel launch");
}

void delayed_scaling_update(const DelayedTensor* tensors, std::size_t count,
                            const DelayedScaling& rule, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  // The tensors travel in the kernel's parameters, so the host array may go as soon as this
  // returns, and a CUDA graph capture records them by value.
  for (std::size_t first = 0; first < count; first += kDelayedPerLaunch) {
    const DelayedBatch batch = delayed_batch(tensors, count, first);
    delayed_update_kernel<<<1, kDelayedPerLaunch, 0, s>>>(batch, rule);
    check(cudaGetLastError(), "fp8 delayed_update_kernel launch");
  }
}

}  // namespace mixprec::core::cuda
