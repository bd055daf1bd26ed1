// CUDA fused optimizer kernels (include/mixprec/core/optim_kernels.h; the dispatch point,
// src/core/kernels.cpp, checks the arguments): multi-tensor launches that unscale each gradient,
// apply the SGD or Adam(W) math and write parameter, gradient and state back in one pass, with
// found_inf, grad_scale and the step counts read on the device, so nothing waits for the host.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/element_ops.h"
#include "cuda/kernels.h"
#include "cuda/multi_tensor.cuh"

// No fast math here: nvcc defines no macro for --use_fast_math (nor __CUDA_FTZ for it, checked
// with nvcc 13), so CMakeLists.txt appends IEEE flags after the user's (MIXPREC_CUDA_IEEE_FLAGS),
// and the test cuda.ieee_arithmetic_under_fast_math checks the PTX.

namespace mixprec::core::cuda {
namespace {

using SgdMeta = ChunkMeta<3, 48, 320>;
using AdamMeta = ChunkMeta<5, 36, 320>;
static_assert(sizeof(SgdMeta) + sizeof(SgdHyper) + 2 * sizeof(void*) <= 4096, "parameter limit");
static_assert(sizeof(AdamMeta) + sizeof(AdamHyper) + 2 * sizeof(void*) <= 4096, "parameter limit");

// The element math is in element_ops.h (Note [CUDA fused kernels compute as the CPU ones]); a
// kernel skips on found_inf, finds its chunk, makes the op and runs the chunk loop.
template <typename T, bool kMomentum>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(SgdMeta meta, SgdHyper h, const float* grad_scale, const float* found_inf,
               const float* clip_coef) {
  if (skip_step(found_inf)) return;
  using Op = SgdOp<T, kMomentum>;
  std::int64_t begin = 0, end = 0;
  const int t = block_chunk(meta, &begin, &end);
  const Op op = make_sgd_op<T, kMomentum>(h, inverse_scale(grad_scale), meta.counter[t],
                                                 clip_coef);
  T* ptr[Op::kDepth];
  bool write[Op::kDepth];
  for (int d = 0; d < Op::kDepth; ++d) {
    ptr[d] = static_cast<T*>(meta.data[d][t]);
    write[d] = d != 1 || op.unscale;
  }
  chunk_loop<Op::kDepth>(ptr, write, begin, end, op, threadIdx.x, blockDim.x);
}

template <typename T, bool kAmsgrad>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(AdamMeta meta, AdamHyper h, const float* grad_scale, const float* found_inf,
                const float* clip_coef) {
  if (skip_step(found_inf)) return;
  using Op = AdamOp<T, kAmsgrad>;
  std::int64_t begin = 0, end = 0;
  const int t = block_chunk(meta, &begin, &end);
  // This parameter's own step, counting from 1, as LibTorch.
  const Op op = make_adam_op<T, kAmsgrad>(h, inverse_scale(grad_scale), *meta.counter[t] + 1,
                                                 clip_coef);
  T* ptr[Op::kDepth];
  bool write[Op::kDepth];
  for (int d = 0; d < Op::kDepth; ++d) {
    ptr[d] = static_cast<T*>(meta.data[d][t]);
    write[d] = d != 1 || op.unscale;
  }
  chunk_loop<Op::kDepth>(ptr, write, begin, end, op, threadIdx.x, blockDim.x);
}

// Adds 1 to each step count unless the step was skipped. Launched after every update launch of
// the step, so no block of those reads a count this kernel has changed.
constexpr int kCountsPerLaunch = 256;
struct Counts {
  std::int64_t* count[kCountsPerLaunch];
};

__global__ void advance_kernel(Counts counts, int n, const float* found_inf) {
  if (skip_step(found_inf)) return;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) ++*counts.count[i];
}

void advance_counts(const std::vector<std::int64_t*>& counts, const float* found_inf,
                    cudaStream_t stream) {
  for (std::size_t first = 0; first < counts.size(); first += kCountsPerLaunch) {
    Counts batch{};
    int n = 0;
    for (std::size_t i = first; i < counts.size() && n < kCountsPerLaunch; ++i) {
      batch.count[n++] = counts[i];
    }
    advance_kernel<<<1, kCountsPerLaunch, 0, stream>>>(batch, n, found_inf);
    check(cudaGetLastError(), "advance_kernel launch");
  }
}

// One fused step: the kernel over the float32, then the float64 parameters, then the step counts
// of an applied step advance. `set(meta, slot, tensors)` fills a slot from a parameter;
// `kernel(T{}, flag, meta, blocks)` launches the kernel for dtype T and the compile-time `flag`
// (momentum for SGD, amsgrad for Adam).
template <typename Meta, typename Tensors, typename Set, typename Kernel>
void run_step(const Tensors* params, std::size_t count, bool flag, const Set& set,
              const Kernel& kernel, const float* found_inf, cudaStream_t stream) {
  std::vector<std::size_t> index[2];  // the float32 (0) and float64 (1) parameters
  for (std::size_t i = 0; i < count; ++i) {
    index[params[i].param.dtype == DType::kFloat64 ? 1 : 0].push_back(i);
  }
  const auto over = [&](auto type_tag, auto flag_tag, const std::vector<std::size_t>& idx) {
    for_each_launch<Meta>(
        idx.size(), [&](std::size_t k) { return params[idx[k]].param.numel; },
        [&](Meta& meta, int slot, std::size_t k) { set(meta, slot, params[idx[k]]); },
        [&](const Meta& meta, int blocks) { kernel(type_tag, flag_tag, meta, blocks); });
  };
  if (flag) {
    over(float{}, std::true_type{}, index[0]);
    over(double{}, std::true_type{}, index[1]);
  } else {
    over(float{}, std::false_type{}, index[0]);
    over(double{}, std::false_type{}, index[1]);
  }
  std::vector<std::int64_t*> counts;
  for (std::size_t i = 0; i < count; ++i) {
    if (params[i].step_count != nullptr) counts.push_back(params[i].step_count);
  }
  advance_counts(counts, found_inf, stream);
}

}  // namespace

void fused_sgd(const SgdTensors* params, std::size_t count, const SgdHyper& hyper,
               const float* grad_scale, const float* found_inf, void* stream,
               const float* clip_coef) {
  const auto s = static_cast<cudaStream_t>(stream);
  const bool momentum = hyper.momentum != 0.0;
  run_step<SgdMeta>(
      params, count, momentum,
      [&](SgdMeta& meta, int slot, const SgdTensors& t) {
        meta.data[0][slot] = t.param.data;
        meta.data[1][slot] = t.grad.data;
        meta.data[2][slot] = momentum ? t.momentum_buffer.data : nullptr;
        meta.counter[slot] = t.step_count;
      },
      [&](auto type_tag, auto momentum_tag, const SgdMeta& meta, int blocks) {
        sgd_kernel<decltype(type_tag), decltype(momentum_tag)::value>
            <<<blocks, kThreads, 0, s>>>(meta, hyper, grad_scale, found_inf, clip_coef);
        check(cudaGetLastError(), "sgd_kernel launch");
      },
      found_inf, s);
}

void fused_adam(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                const float* grad_scale, const float* found_inf, void* stream,
                const float* clip_coef) {
  const auto s = static_cast<cudaStream_t>(stream);
  run_step<AdamMeta>(
      params, count, hyper.amsgrad,
      [&](AdamMeta& meta, int slot, const AdamTensors& t) {
        meta.data[0][slot] = t.param.data;
        meta.data[1][slot] = t.grad.data;
        meta.data[2][slot] = t.exp_avg.data;
        meta.data[3][slot] = t.exp_avg_sq.data;
        meta.data[4][slot] = hyper.amsgrad ? t.max_exp_avg_sq.data : nullptr;
        meta.counter[slot] = t.step_count;
      },
      [&](auto type_tag, auto amsgrad_tag, const AdamMeta& meta, int blocks) {
        adam_kernel<decltype(type_tag), decltype(amsgrad_tag)::value>
            <<<blocks, kThreads, 0, s>>>(meta, hyper, grad_scale, found_inf, clip_coef);
        check(cudaGetLastError(), "adam_kernel launch");
      },
      found_inf, s);
}

}  // namespace mixprec::core::cuda
