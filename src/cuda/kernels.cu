// CUDA kernels of the core: the multi-tensor unscale-and-check (chunks of many tensors per launch,
// as PyTorch's multi_tensor_apply, for fp32/fp64/fp16/bf16 — PyTorch's own kernel lacks bf16,
// pytorch/pytorch#127176) and the one-thread update kernel that runs THE update rule.
#include <cuda_runtime.h>

#include "core/element_ops.h"
#include "cuda/kernels.h"
#include "cuda/multi_tensor.cuh"
#include "mixprec/core/error.h"
#include "mixprec/core/half.h"

// No fast math here: nvcc defines no macro for --use_fast_math (nor __CUDA_FTZ for it, checked
// with nvcc 13), so CMakeLists.txt appends IEEE flags after the user's (MIXPREC_CUDA_IEEE_FLAGS),
// and the test cuda.ieee_arithmetic_under_fast_math checks the PTX.

namespace mixprec::core::cuda {
namespace {

using UnscaleMeta = ChunkMeta<1, 48, 320>;
static_assert(sizeof(UnscaleMeta) + 2 * sizeof(void*) <= 4096, "kernel parameter limit");

// This block's chunk of one tensor of dtype kType; true when it holds a non-finite value.
template <DType kType>
__device__ bool unscale_chunk(void* data, std::int64_t begin, std::int64_t end, float inv) {
  using Storage = typename UnscaleType<kType>::Storage;
  UnscaleOp<kType> op = make_unscale_op<kType>(inv);
  Storage* const ptr[1] = {static_cast<Storage*>(data)};
  const bool write[1] = {op.write};
  chunk_loop<1>(ptr, write, begin, end, op, threadIdx.x, blockDim.x);
  return op.found;
}

__global__ void __launch_bounds__(kThreads)
    unscale_kernel(UnscaleMeta meta, float* found_inf, const float* inv_scale) {
  const float inv = *inv_scale;  // every thread reads it; it hits in cache
  std::int64_t begin = 0, end = 0;
  const int t = block_chunk(meta, &begin, &end);
  void* data = meta.data[0][t];
  bool found = false;
  switch (static_cast<DType>(meta.dtype[t])) {
    case DType::kFloat32:
      found = unscale_chunk<DType::kFloat32>(data, begin, end, inv);
      break;
    case DType::kFloat64:
      found = unscale_chunk<DType::kFloat64>(data, begin, end, inv);
      break;
    case DType::kFloat16:
      found = unscale_chunk<DType::kFloat16>(data, begin, end, inv);
      break;
    case DType::kBFloat16:
      found = unscale_chunk<DType::kBFloat16>(data, begin, end, inv);
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
  for_each_launch<UnscaleMeta>(
      count, [&](std::size_t i) { return grads[i].numel; },
      [&](UnscaleMeta& meta, int slot, std::size_t i) {
        meta.data[0][slot] = grads[i].data;
        meta.dtype[slot] = static_cast<std::uint8_t>(grads[i].dtype);
      },
      [&](const UnscaleMeta& meta, int blocks) {
        unscale_kernel<<<blocks, kThreads, 0, s>>>(meta, found_inf, inv_scale);
        check(cudaGetLastError(), "unscale_kernel launch");
      });
}

void update_scale(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                  const ScalePolicy& policy, void* stream, std::int64_t* counters, double* history,
                  std::int64_t history_capacity) {
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
