// CUDA kernels of the core's FP4 scaling (include/mixprec/core/fp4.h; the dispatch point is
// src/core/kernels_fp4.cpp): NVFP4 quantize (1D blocks and 2D tiles, stochastic rounding) and
// dequantize, MXFP4 quantize and dequantize, and the RHT. One thread per block; its work is
// fp4_elements.cuh's host/device code over core/fp4_ops.h's functions, the ones the CPU kernels
// (src/cpu/fp4.cpp) call, so a CUDA tensor gets the CPU's bits (tests/cuda/fp4_element_test.cpp
// runs that code on the host, tests/cuda/cuda_fp4_test.cpp the kernels on a device).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/fp4_elements.cuh"
#include "cuda/kernels.h"
#include "cuda/multi_tensor.cuh"  // check()
#include "mixprec/core/error.h"

// No fast math here (CMakeLists.txt's MIXPREC_CUDA_IEEE_FLAGS, checked on the PTX by the test
// cuda.ieee_arithmetic_under_fast_math): the rules' roundings are IEEE's, subnormals included.
//
// The E2M1 conversions are core/fp4.h's software ones (host/device functions, integer compares),
// which every architecture runs: no cvt.*e2m1x2 PTX, which exists only on sm_100a/sm_120a-class
// targets and whose stochastic form draws its own random bits. So this one file builds for sm_75
// to sm_90 and for sm_100a/sm_120a with nvcc 13, and gives the CPU's codes on each.

namespace mixprec::core::cuda {
namespace {

constexpr int kFp4Threads = 256;  // per block: 8 warps
// Grid-stride kernels use at most this many blocks, as fp8.cu's.
constexpr std::int64_t kMaxBlocks = 1024;

int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kFp4Threads - 1) / kFp4Threads;
  return static_cast<int>(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

__device__ std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ std::int64_t thread_count() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// One thread per block of 16, grid-stride; *amax read on the device (no host synchronisation),
// the per-tensor scales computed in every thread by the one rule.
template <DType kType>
__global__ void __launch_bounds__(kFp4Threads)
    quantize_nvfp4_kernel(const Fp4Storage<kType>* x, std::int64_t blocks, const float* amax,
                          std::uint8_t* q, std::uint8_t* block_scales, Nvfp4Options options) {
  const Nvfp4TensorScales scales = nvfp4_tensor_scales(*amax);  // every thread reads it: cached
  for (std::int64_t b = thread_index(); b < blocks; b += thread_count()) {
    nvfp4_quantize_block<kType>(x, b, scales, options, q, block_scales);
  }
}

// 2D: a half-warp per 16 x 16 tile, each lane one row of it (nvfp4_tile_block), the tile's amax
// reduced over the half-warp by shuffles. `blocks` is a multiple of 16 (the row count is) and the
// grid's stride a multiple of 32, so a half-warp stays together through the loop.
template <DType kType>
__global__ void __launch_bounds__(kFp4Threads)
    quantize_nvfp4_2d_kernel(const Fp4Storage<kType>* x, std::int64_t blocks,
                             std::int64_t blocks_per_row, const float* amax, std::uint8_t* q,
                             std::uint8_t* block_scales, Nvfp4Options options) {
  const Nvfp4TensorScales scales = nvfp4_tensor_scales(*amax);
  const unsigned half_warp = 0xffffu << (threadIdx.x & 16u);
  for (std::int64_t unit = thread_index(); unit < blocks; unit += thread_count()) {
    const std::int64_t b = nvfp4_tile_block(unit, blocks_per_row);
    float v[16];
    fp4_load<kType, 16>(x, b * 16, v);
    float tile_amax = amax_skip_nan(v, 16);
    for (int offset = 8; offset > 0; offset /= 2) {
      tile_amax = nvfp4_tile_max(tile_amax, __shfl_xor_sync(half_warp, tile_amax, offset, 16));
    }
    nvfp4_quantize_tile_row(v, b, tile_amax, scales, options, q, block_scales);
  }
}

template <DType kType>
__global__ void __launch_bounds__(kFp4Threads)
    dequantize_nvfp4_kernel(const std::uint8_t* q, const std::uint8_t* block_scales,
                            const float* amax, std::int64_t blocks, Fp4Storage<kType>* out) {
  const float a = *amax;
  for (std::int64_t b = thread_index(); b < blocks; b += thread_count()) {
    nvfp4_dequantize_block<kType>(q, block_scales, a, b, out);
  }
}

// One thread per block of 32.
template <DType kType>
__global__ void __launch_bounds__(kFp4Threads)
    quantize_mxfp4_kernel(const Fp4Storage<kType>* x, std::int64_t blocks, MxScaleMode mode,
                          std::uint8_t* q, std::uint8_t* scales) {
  for (std::int64_t b = thread_index(); b < blocks; b += thread_count()) {
    mxfp4_quantize_block<kType>(x, b, mode, q, scales);
  }
}

template <DType kType>
__global__ void __launch_bounds__(kFp4Threads)
    dequantize_mxfp4_kernel(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t blocks,
                            Fp4Storage<kType>* out) {
  for (std::int64_t b = thread_index(); b < blocks; b += thread_count()) {
    mxfp4_dequantize_block<kType>(q, scales, b, out);
  }
}

// One thread per run of 16.
template <DType kType>
__global__ void __launch_bounds__(kFp4Threads)
    hadamard16_kernel(const Fp4Storage<kType>* x, std::int64_t runs, std::uint16_t* out) {
  for (std::int64_t g = thread_index(); g < runs; g += thread_count()) {
    hadamard16_run<kType>(x, g, out);
  }
}

// Calls f(DType-tag) with the dtype as a compile-time constant.
template <typename F>
void with_type(DType dtype, const F& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(std::integral_constant<DType, DType::kFloat32>{});
    case DType::kFloat64:
      return f(std::integral_constant<DType, DType::kFloat64>{});
    case DType::kFloat16:
      return f(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kBFloat16:
      return f(std::integral_constant<DType, DType::kBFloat16>{});
  }
  MIXPREC_INTERNAL_ASSERT(false);
}

}  // namespace

void quantize_nvfp4(const TensorView& x, std::int64_t cols, const float* amax, std::uint8_t* q,
                    std::uint8_t* block_scales, const Nvfp4Options& options, void* stream) {
  if (x.numel == 0) return;
  MIXPREC_INTERNAL_ASSERT(cols > 0 && cols % 16 == 0 && x.numel % cols == 0);
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t blocks = x.numel / 16;
  with_type(x.dtype, [&](auto type) {
    constexpr DType kType = decltype(type)::value;
    const auto* data = static_cast<const Fp4Storage<kType>*>(x.data);
    if (options.two_d) {
      MIXPREC_INTERNAL_ASSERT(blocks % 16 == 0);  // rows: a multiple of 16 (the dispatch checks)
      quantize_nvfp4_2d_kernel<kType><<<blocks_for(blocks), kFp4Threads, 0, s>>>(
          data, blocks, cols / 16, amax, q, block_scales, options);
    } else {
      quantize_nvfp4_kernel<kType>
          <<<blocks_for(blocks), kFp4Threads, 0, s>>>(data, blocks, amax, q, block_scales, options);
    }
  });
  check(cudaGetLastError(), "fp4 quantize_nvfp4_kernel launch");
}

void dequantize_nvfp4(const std::uint8_t* q, const std::uint8_t* block_scales, const float* amax,
                      std::int64_t cols, const TensorView& out, void* stream) {
  (void)cols;  // one scale a row and block: the layout is flat whatever the tiling
  if (out.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t blocks = out.numel / 16;
  with_type(out.dtype, [&](auto type) {
    constexpr DType kType = decltype(type)::value;
    dequantize_nvfp4_kernel<kType><<<blocks_for(blocks), kFp4Threads, 0, s>>>(
        q, block_scales, amax, blocks, static_cast<Fp4Storage<kType>*>(out.data));
  });
  check(cudaGetLastError(), "fp4 dequantize_nvfp4_kernel launch");
}

void quantize_mxfp4(const TensorView& x, std::uint8_t* q, std::uint8_t* scales, MxScaleMode mode,
                    void* stream) {
  if (x.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t blocks = x.numel / 32;
  with_type(x.dtype, [&](auto type) {
    constexpr DType kType = decltype(type)::value;
    quantize_mxfp4_kernel<kType><<<blocks_for(blocks), kFp4Threads, 0, s>>>(
        static_cast<const Fp4Storage<kType>*>(x.data), blocks, mode, q, scales);
  });
  check(cudaGetLastError(), "fp4 quantize_mxfp4_kernel launch");
}

void dequantize_mxfp4(const std::uint8_t* q, const std::uint8_t* scales, const TensorView& out,
                      void* stream) {
  if (out.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t blocks = out.numel / 32;
  with_type(out.dtype, [&](auto type) {
    constexpr DType kType = decltype(type)::value;
    dequantize_mxfp4_kernel<kType><<<blocks_for(blocks), kFp4Threads, 0, s>>>(
        q, scales, blocks, static_cast<Fp4Storage<kType>*>(out.data));
  });
  check(cudaGetLastError(), "fp4 dequantize_mxfp4_kernel launch");
}

void hadamard16(const TensorView& x, std::uint16_t* out, void* stream) {
  if (x.numel == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t runs = x.numel / 16;
  with_type(x.dtype, [&](auto type) {
    constexpr DType kType = decltype(type)::value;
    hadamard16_kernel<kType><<<blocks_for(runs), kFp4Threads, 0, s>>>(
        static_cast<const Fp4Storage<kType>*>(x.data), runs, out);
  });
  check(cudaGetLastError(), "fp4 hadamard16_kernel launch");
}

}  // namespace mixprec::core::cuda
