// CUDA clipping kernels (include/mixprec/core/clip_kernels.h; the dispatch point,
// src/core/kernels.cpp, checks the arguments): the norm with the inf check in one read, and the
// unscale-and-clip multiply, as multi-tensor launches that never wait for the host.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/element_ops.h"
#include "cuda/kernels.h"
#include "cuda/multi_tensor.cuh"

// No fast math here: see kernels.cu.

namespace mixprec::core::cuda {
namespace {

// Note [The CUDA clip norm]
// Each block reduces its chunk (multi_tensor.cuh): every thread runs NormOp over its strided
// share, then the block combines the 512 partials in a fixed tree in shared memory and writes one
// Partial. A last one-thread kernel adds the partials in chunk order, view by view, then the
// views in order. The order depends on kChunk and kThreads only, never on the launch or the GPU,
// so a norm is reproducible from run to run. The partials live in memory taken with
// cudaMallocAsync on the stream and given back the same way: nothing synchronises.
struct Partial {
  double value;
  std::int32_t view;
};

using NormMeta = ChunkMeta<1, 48, 320>;
struct Views {
  std::int32_t of_slot[NormMeta::kMaxTensorsPerLaunch];  // the view index of each slot
};
static_assert(sizeof(NormMeta) + sizeof(Views) + 6 * sizeof(void*) <= 4096, "parameter limit");

template <DType kType, NormKind kKind>
__device__ void norm_chunk(void* data, std::int64_t begin, std::int64_t end, float inv,
                           double* value, bool* found) {
  using Storage = typename UnscaleType<kType>::Storage;
  NormOp<kType, kKind> op = make_norm_op<kType, kKind>(inv);
  Storage* const ptr[1] = {static_cast<Storage*>(data)};
  const bool write[1] = {false};
  chunk_loop<1>(ptr, write, begin, end, op, threadIdx.x, blockDim.x);
  *value = op.value;
  *found = op.found;
}

template <NormKind kKind>
__global__ void __launch_bounds__(kThreads)
    norm_kernel(NormMeta meta, Views views, std::int64_t first_block, const float* inv_scale,
                float* found_inf, Partial* partials) {
  const float inv = inv_scale == nullptr ? 1.0f : *inv_scale;
  std::int64_t begin = 0, end = 0;
  const int t = block_chunk(meta, &begin, &end);
  double value = 0.0;
  bool found = false;
  switch (static_cast<DType>(meta.dtype[t])) {
    case DType::kFloat32:
      norm_chunk<DType::kFloat32, kKind>(meta.data[0][t], begin, end, inv, &value, &found);
      break;
    case DType::kFloat64:
      norm_chunk<DType::kFloat64, kKind>(meta.data[0][t], begin, end, inv, &value, &found);
      break;
    case DType::kFloat16:
      norm_chunk<DType::kFloat16, kKind>(meta.data[0][t], begin, end, inv, &value, &found);
      break;
    case DType::kBFloat16:
      norm_chunk<DType::kBFloat16, kKind>(meta.data[0][t], begin, end, inv, &value, &found);
      break;
  }
  if (found && found_inf != nullptr) *found_inf = 1.0f;  // benign race: all write 1
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {  // a fixed tree
    if (static_cast<int>(threadIdx.x) < stride) {
      const double other = shared[threadIdx.x + stride];
      shared[threadIdx.x] = kKind == NormKind::kTwo ? shared[threadIdx.x] + other
                                                    : NormOp<DType::kFloat32, kKind>::max_keep_nan(
                                                          shared[threadIdx.x], other);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[first_block + blockIdx.x] = {shared[0], views.of_slot[t]};
}

template <NormKind kKind>
__global__ void combine_kernel(const Partial* partials, std::int64_t n, std::int64_t views,
                               double* out, double* per_view) {
  double total = 0.0;
  double view = 0.0;
  std::int32_t current = n > 0 ? partials[0].view : 0;
  const auto add = [](double a, double b) {
    return kKind == NormKind::kTwo ? a + b : NormOp<DType::kFloat32, kKind>::max_keep_nan(a, b);
  };
  if (per_view != nullptr) {
    for (std::int64_t i = 0; i < views; ++i) per_view[i] = 0.0;  // empty views: 0
  }
  for (std::int64_t i = 0; i < n; ++i) {
    if (partials[i].view != current) {
      if (per_view != nullptr) per_view[current] = view;
      total = add(total, view);
      view = 0.0;
      current = partials[i].view;
    }
    view = add(view, partials[i].value);
  }
  if (n > 0) {
    if (per_view != nullptr) per_view[current] = view;
    total = add(total, view);
  }
  *out = total;
}

template <DType kType>
__device__ void clip_chunk(void* data, std::int64_t begin, std::int64_t end, float inv,
                           float coef) {
  using Storage = typename UnscaleType<kType>::Storage;
  const ClipOp<kType> op = make_clip_op<kType>(inv, coef);
  Storage* const ptr[1] = {static_cast<Storage*>(data)};
  const bool write[1] = {true};
  chunk_loop<1>(ptr, write, begin, end, op, threadIdx.x, blockDim.x);
}

__global__ void __launch_bounds__(kThreads)
    clip_kernel(NormMeta meta, const float* inv_scale, const float* coef) {
  const float inv = inv_scale == nullptr ? 1.0f : *inv_scale;
  const float c = *coef;
  std::int64_t begin = 0, end = 0;
  const int t = block_chunk(meta, &begin, &end);
  switch (static_cast<DType>(meta.dtype[t])) {
    case DType::kFloat32:
      return clip_chunk<DType::kFloat32>(meta.data[0][t], begin, end, inv, c);
    case DType::kFloat64:
      return clip_chunk<DType::kFloat64>(meta.data[0][t], begin, end, inv, c);
    case DType::kFloat16:
      return clip_chunk<DType::kFloat16>(meta.data[0][t], begin, end, inv, c);
    case DType::kBFloat16:
      return clip_chunk<DType::kBFloat16>(meta.data[0][t], begin, end, inv, c);
  }
}

template <NormKind kKind>
void run_norm(const TensorView* grads, std::size_t count, const float* inv_scale, double* out,
              float* found_inf, double* per_view, cudaStream_t s) {
  std::int64_t chunks = 0;
  for (std::size_t i = 0; i < count; ++i) chunks += (grads[i].numel + kChunk - 1) / kChunk;
  Partial* partials = nullptr;
  if (chunks > 0) {
    check(cudaMallocAsync(reinterpret_cast<void**>(&partials), sizeof(Partial) * chunks, s),
          "cudaMallocAsync of the norm's partials");
  }
  std::int64_t first_block = 0;
  Views views{};
  for_each_launch<NormMeta>(
      count, [&](std::size_t i) { return grads[i].numel; },
      [&](NormMeta& meta, int slot, std::size_t i) {
        meta.data[0][slot] = grads[i].data;
        meta.dtype[slot] = static_cast<std::uint8_t>(grads[i].dtype);
        views.of_slot[slot] = static_cast<std::int32_t>(i);
      },
      [&](const NormMeta& meta, int blocks) {
        norm_kernel<kKind>
            <<<blocks, kThreads, 0, s>>>(meta, views, first_block, inv_scale, found_inf, partials);
        check(cudaGetLastError(), "norm_kernel launch");
        first_block += blocks;
      });
  combine_kernel<kKind>
      <<<1, 1, 0, s>>>(partials, chunks, static_cast<std::int64_t>(count), out, per_view);
  check(cudaGetLastError(), "combine_kernel launch");
  if (partials != nullptr) check(cudaFreeAsync(partials, s), "cudaFreeAsync of the partials");
}

}  // namespace

void grad_norm(const TensorView* grads, std::size_t count, NormKind kind, const float* inv_scale,
               double* out, float* found_inf, double* per_view, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (kind == NormKind::kTwo) {
    run_norm<NormKind::kTwo>(grads, count, inv_scale, out, found_inf, per_view, s);
  } else {
    run_norm<NormKind::kInf>(grads, count, inv_scale, out, found_inf, per_view, s);
  }
}

void unscale_and_clip(const TensorView* grads, std::size_t count, const float* inv_scale,
                      const float* coef, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  for_each_launch<NormMeta>(
      count, [&](std::size_t i) { return grads[i].numel; },
      [&](NormMeta& meta, int slot, std::size_t i) {
        meta.data[0][slot] = grads[i].data;
        meta.dtype[slot] = static_cast<std::uint8_t>(grads[i].dtype);
      },
      [&](const NormMeta& meta, int blocks) {
        clip_kernel<<<blocks, kThreads, 0, s>>>(meta, inv_scale, coef);
        check(cudaGetLastError(), "clip_kernel launch");
      });
}

}  // namespace mixprec::core::cuda
