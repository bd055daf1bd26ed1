// CUDA kernels of the core: the multi-tensor unscale-and-check (chunks of many tensors per launch,
// as PyTorch's multi_tensor_apply, for fp32/fp64/fp16/bf16 — PyTorch's own kernel lacks bf16,
// pytorch/pytorch#127176) and the one-thread update kernel that runs THE update rule.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/kernels.h"
#include "mixprec/core/error.h"
#include "mixprec/core/half.h"

#if defined(__FAST_MATH__) || defined(__CUDA_FTZ) && __CUDA_FTZ
#error "mixprec kernels must not be built with fast math (--use_fast_math flushes denormals)"
#endif

namespace mixprec::core::cuda {
namespace {

constexpr int kThreads = 512;
constexpr std::int64_t kChunk = 65536;  // elements per block
constexpr int kMaxTensors = 48;         // per launch; metadata is passed by value
constexpr int kMaxBlocks = 320;

// Kernel arguments are at most 4 KiB: the tensors of one launch and, per block, its chunk.
struct LaunchMeta {
  void* data[kMaxTensors];
  std::int64_t numel[kMaxTensors];
  std::uint8_t dtype[kMaxTensors];
  std::uint8_t block_tensor[kMaxBlocks];
  std::int32_t block_chunk[kMaxBlocks];
};
static_assert(sizeof(LaunchMeta) <= 4096, "kernel parameter limit");

void check(cudaError_t err, const char* what) {
  MIXPREC_CHECK(err == cudaSuccess, "mixprec CUDA: ", what, " failed: ", cudaGetErrorString(err));
}

template <typename Storage, typename Compute, typename Load, typename Store, typename NonFinite>
__device__ bool unscale_chunk(Storage* p, std::int64_t begin, std::int64_t end, Compute inv,
                              Load load, Store store, NonFinite nonfinite) {
  bool found = false;
  const bool multiply = inv != Compute(1);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const Storage v = p[i];
    found |= nonfinite(v);
    if (multiply) p[i] = store(load(v) * inv);
  }
  return found;
}

__global__ void unscale_kernel(LaunchMeta meta, float* found_inf, const float* inv_scale) {
  // Every thread reads inv_scale, but it will hit in cache.
  const float inv = *inv_scale;
  const int t = meta.block_tensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(meta.block_chunk[blockIdx.x]) * kChunk;
  const std::int64_t end = begin + kChunk < meta.numel[t] ? begin + kChunk : meta.numel[t];
  const auto same = [] __device__(auto v) { return v; };
  bool found = false;
  switch (static_cast<DType>(meta.dtype[t])) {
    case DType::kFloat32:
      found = unscale_chunk(static_cast<float*>(meta.data[t]), begin, end, inv, same, same,
                            [] __device__(float v) { return is_nonfinite(v); });
      break;
    case DType::kFloat64:
      found = unscale_chunk(static_cast<double*>(meta.data[t]), begin, end,
                            static_cast<double>(inv), same, same,
                            [] __device__(double v) { return is_nonfinite(v); });
      break;
    case DType::kFloat16:
      found = unscale_chunk(static_cast<std::uint16_t*>(meta.data[t]), begin, end, inv,
                            [] __device__(std::uint16_t v) { return half_bits_to_float(v); },
                            [] __device__(float v) { return float_to_half_bits(v); },
                            [] __device__(std::uint16_t v) { return half_bits_nonfinite(v); });
      break;
    case DType::kBFloat16:
      found = unscale_chunk(static_cast<std::uint16_t*>(meta.data[t]), begin, end, inv,
                            [] __device__(std::uint16_t v) { return bf16_bits_to_float(v); },
                            [] __device__(float v) { return float_to_bf16_bits(v); },
                            [] __device__(std::uint16_t v) { return bf16_bits_nonfinite(v); });
      break;
  }
  // Every writer writes the same 1.0f, so the race is benign; found_inf is never cleared.
  if (found) *found_inf = 1.0f;
}

__global__ void update_kernel(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                              ScalePolicy policy, std::int64_t* counters, double* history,
                              std::int64_t history_capacity) {
  update_scale_state(scale, growth_tracker, counters, history, history_capacity, *found_inf,
                     policy);
}

}  // namespace

void non_finite_check_and_unscale(const TensorView* grads, std::size_t count, float* found_inf,
                                  const float* inv_scale, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  LaunchMeta meta{};
  int tensors = 0;
  int blocks = 0;
  const auto launch = [&]() {
    if (blocks == 0) return;
    unscale_kernel<<<blocks, kThreads, 0, s>>>(meta, found_inf, inv_scale);
    check(cudaGetLastError(), "unscale_kernel launch");
    tensors = 0;
    blocks = 0;
  };
  for (std::size_t i = 0; i < count; ++i) {
    const TensorView& g = grads[i];
    if (g.numel == 0) continue;
    const std::int64_t chunks = (g.numel + kChunk - 1) / kChunk;
    for (std::int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || blocks == 0) {
        if (tensors == kMaxTensors) launch();
        meta.data[tensors] = g.data;
        meta.numel[tensors] = g.numel;
        meta.dtype[tensors] = static_cast<std::uint8_t>(g.dtype);
        ++tensors;
      }
      meta.block_tensor[blocks] = static_cast<std::uint8_t>(tensors - 1);
      meta.block_chunk[blocks] = static_cast<std::int32_t>(c);
      ++blocks;
      if (blocks == kMaxBlocks) {
        // The tensor being cut goes on in the next launch as its first tensor.
        launch();
      }
    }
  }
  launch();
}

void update_scale(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                  const ScalePolicy& policy, void* stream, std::int64_t* counters,
                  double* history, std::int64_t history_capacity) {
  update_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(
      scale, growth_tracker, found_inf, policy, counters, history, history_capacity);
  check(cudaGetLastError(), "update_kernel launch");
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace mixprec::core::cuda
