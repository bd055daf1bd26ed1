// Multi-tensor launches of the CUDA kernels (internal), after PyTorch's multi_tensor_apply: the
// tensors are cut into chunks of kChunk elements, one block per chunk, and the chunks of many
// tensors go into one launch whose metadata travels by value in the kernel's parameters.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mixprec/core/error.h"
#include "mixprec/core/macros.h"

// Full unrolling of the constant-trip loops over buffers and vector lanes (nvcc only).
#ifdef __CUDACC__
#define MIXPREC_UNROLL _Pragma("unroll")
#else
#define MIXPREC_UNROLL
#endif

namespace mixprec::core::cuda {

constexpr int kThreads = 512;           // per block
constexpr std::int64_t kChunk = 65536;  // elements per block (a multiple of kIlp)
constexpr int kIlp = 4;                 // elements per thread per iteration (one vector load)

inline void check(cudaError_t err, const char* what) {
  MIXPREC_CHECK(err == cudaSuccess, "mixprec CUDA: ", what, " failed: ", cudaGetErrorString(err));
}

/// The tensors of one launch and, per block, which chunk of which tensor it takes. kDepth
/// buffers per tensor (element i of each belongs together); `counter` is a per-tensor device
/// pointer the optimizer kernels use (null for the unscale kernel). Kernel parameters are limited
/// to 4 KiB, which bounds kMaxTensors and kMaxBlocks.
template <int kDepth, int kMaxTensors, int kMaxBlocks>
struct ChunkMeta {
  static constexpr int kMaxTensorsPerLaunch = kMaxTensors;
  static constexpr int kMaxBlocksPerLaunch = kMaxBlocks;
  void* data[kDepth][kMaxTensors];
  std::int64_t numel[kMaxTensors];
  std::int64_t* counter[kMaxTensors];
  std::uint8_t dtype[kMaxTensors];
  std::uint8_t block_tensor[kMaxBlocks];
  std::int32_t block_chunk[kMaxBlocks];
};

/// Fills metas and calls `launch(meta, blocks)` for every batch of chunks of `count` tensors.
/// `set(meta, slot, i)` writes tensor i's buffers into slot `slot`; `numel(i)` is its size.
/// A tensor cut by a full launch goes on as the first tensor of the next one.
template <typename Meta, typename Numel, typename Set, typename Launch>
void for_each_launch(std::size_t count, const Numel& numel, const Set& set, const Launch& launch) {
  Meta meta{};
  int tensors = 0;
  int blocks = 0;
  const auto flush = [&]() {
    if (blocks > 0) launch(meta, blocks);
    tensors = 0;
    blocks = 0;
  };
  for (std::size_t i = 0; i < count; ++i) {
    const std::int64_t n = numel(i);
    if (n == 0) continue;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    for (std::int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || blocks == 0) {
        if (tensors == Meta::kMaxTensorsPerLaunch) flush();
        meta.numel[tensors] = n;
        meta.counter[tensors] = nullptr;
        set(meta, tensors, i);
        ++tensors;
      }
      meta.block_tensor[blocks] = static_cast<std::uint8_t>(tensors - 1);
      meta.block_chunk[blocks] = static_cast<std::int32_t>(c);
      if (++blocks == Meta::kMaxBlocksPerLaunch) flush();
    }
  }
  flush();
}

/// Calls `op(e)` for every element of a block's chunk [begin, end) of the kDepth buffers `ptr`,
/// with `e[d]` the element of buffer d in registers, for the share of thread `thread` of
/// `threads` (on the device: threadIdx.x of blockDim.x; tests run every thread on the host).
/// Buffers whose `write[d]` is set are stored back. When all buffers are aligned, each thread
/// moves kIlp elements per buffer with one vector load and store; otherwise, and for the
/// chunk's tail, one element at a time.
template <int kDepth, typename T, typename Op>
MIXPREC_HOST_DEVICE void chunk_loop(T* const (&ptr)[kDepth], const bool (&write)[kDepth],
                                    std::int64_t begin, std::int64_t end, Op& op,
                                    std::int64_t thread, std::int64_t threads) {
  struct alignas(sizeof(T) * kIlp) Vec {
    T v[kIlp];
  };
  bool aligned = true;
  MIXPREC_UNROLL
  for (int d = 0; d < kDepth; ++d) {
    aligned = aligned && reinterpret_cast<std::uintptr_t>(ptr[d]) % sizeof(Vec) == 0;
  }
  std::int64_t tail = begin;
  if (aligned) {  // begin is a multiple of kChunk, hence of kIlp: the vectors stay aligned
    const std::int64_t vectors = (end - begin) / kIlp;
    for (std::int64_t v = thread; v < vectors; v += threads) {
      T e[kIlp][kDepth];
      MIXPREC_UNROLL
      for (int d = 0; d < kDepth; ++d) {
        const Vec x = reinterpret_cast<const Vec*>(ptr[d] + begin)[v];
        MIXPREC_UNROLL
        for (int l = 0; l < kIlp; ++l) e[l][d] = x.v[l];
      }
      MIXPREC_UNROLL
      for (int l = 0; l < kIlp; ++l) op(e[l]);
      MIXPREC_UNROLL
      for (int d = 0; d < kDepth; ++d) {
        if (!write[d]) continue;
        Vec x;
        MIXPREC_UNROLL
        for (int l = 0; l < kIlp; ++l) x.v[l] = e[l][d];
        reinterpret_cast<Vec*>(ptr[d] + begin)[v] = x;
      }
    }
    tail = begin + vectors * kIlp;
  }
  for (std::int64_t i = tail + thread; i < end; i += threads) {
    T e[kDepth];
    MIXPREC_UNROLL
    for (int d = 0; d < kDepth; ++d) e[d] = ptr[d][i];
    op(e);
    MIXPREC_UNROLL
    for (int d = 0; d < kDepth; ++d) {
      if (write[d]) ptr[d][i] = e[d];
    }
  }
}

#ifdef __CUDACC__  // the device half; everything above is also tested on the host

/// This block's chunk of its tensor in `meta`: [begin, end) and the tensor's slot.
template <typename Meta>
__device__ int block_chunk(const Meta& meta, std::int64_t* begin, std::int64_t* end) {
  const int t = meta.block_tensor[blockIdx.x];
  *begin = static_cast<std::int64_t>(meta.block_chunk[blockIdx.x]) * kChunk;
  *end = *begin + kChunk < meta.numel[t] ? *begin + kChunk : meta.numel[t];
  return t;
}

#endif  // __CUDACC__

}  // namespace mixprec::core::cuda
