// CUDA fused optimizer kernels (include/mixprec/core/optim_kernels.h; the dispatch point,
// src/core/kernels.cpp, checks the arguments): multi-tensor launches that unscale each gradient,
// apply the SGD or Adam(W) math and write parameter, gradient and state back in one pass, with
// found_inf, grad_scale and the step counts read on the device, so nothing waits for the host.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/multi_tensor.cuh"

#if defined(__FAST_MATH__) || defined(__CUDA_FTZ) && __CUDA_FTZ
#error "mixprec kernels must not be built with fast math (--use_fast_math flushes denormals)"
#endif

// Note [CUDA fused kernels compute as the CPU ones]
// The per-element expressions below are those of src/cpu/fused_optim.cpp, in the same order and
// in the parameter's type, and CMakeLists.txt builds this file with --fmad=false so that nvcc
// does not contract a * b + c into one FMA (the CPU build has no FMA either). SGD is then
// bit-identical to the CPU kernel; Adam's bias corrections come from the device's pow(), which
// may differ from glibc's in the last bit, so Adam agrees to rounding (tests/cuda).

namespace mixprec::core::cuda {
namespace {

using SgdMeta = ChunkMeta<3, 48, 320>;
using AdamMeta = ChunkMeta<5, 36, 320>;

// The hyper-parameters a kernel needs, by value.
struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};
struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
};
static_assert(sizeof(SgdMeta) + sizeof(SgdArgs) + 2 * sizeof(void*) <= 4096, "parameter limit");
static_assert(sizeof(AdamMeta) + sizeof(AdamArgs) + 2 * sizeof(void*) <= 4096, "parameter limit");

// True when the step is skipped: found_inf is set (any non-zero value, NaN included).
__device__ bool skip_step(const float* found_inf) {
  return found_inf != nullptr && *found_inf != 0.0f;
}

// The inverse GradScaler::unscale_() uses (Note [Fused unscale multiplies by the inverse] in
// src/cpu/fused_optim.cpp); 1 without a grad_scale.
__device__ float inverse_scale(const float* grad_scale) {
  return grad_scale == nullptr ? 1.0f : static_cast<float>(1.0 / static_cast<double>(*grad_scale));
}

// One SGD element: e = {param, grad[, momentum_buffer]}.
template <typename T, bool kMomentum>
struct SgdOp {
  T inv_scale, weight_decay, momentum, one_minus_dampening, neg_lr;
  bool unscale, decay, first, nesterov;

  __device__ void operator()(T (&e)[kMomentum ? 3 : 2]) const {
    T d = e[1];
    if (unscale) {
      d = d * inv_scale;
      e[1] = d;
    }
    const T param = e[0];
    if (decay) d = d + weight_decay * param;
    if constexpr (kMomentum) {
      // LibTorch clones the first gradient into the buffer: no dampening then.
      const T b = first ? d : e[2] * momentum + one_minus_dampening * d;
      e[2] = b;
      d = nesterov ? d + momentum * b : b;
    }
    e[0] = param + neg_lr * d;
  }
};

template <typename T, bool kMomentum>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(SgdMeta meta, SgdArgs h, const float* grad_scale, const float* found_inf) {
  if (skip_step(found_inf)) return;
  constexpr int kDepth = kMomentum ? 3 : 2;
  std::int64_t begin = 0, end = 0;
  const int t = block_chunk(meta, &begin, &end);
  const float inv = inverse_scale(grad_scale);
  const std::int64_t* count = meta.counter[t];
  const SgdOp<T, kMomentum> op{static_cast<T>(inv),
                               static_cast<T>(h.weight_decay),
                               static_cast<T>(h.momentum),
                               static_cast<T>(1.0 - h.dampening),
                               static_cast<T>(-1.0 * h.lr),
                               inv != 1.0f,
                               h.weight_decay != 0.0,
                               count != nullptr && *count == 0,
                               h.nesterov};
  T* ptr[kDepth];
  bool write[kDepth];
  for (int d = 0; d < kDepth; ++d) {
    ptr[d] = static_cast<T*>(meta.data[d][t]);
    write[d] = d != 1 || op.unscale;
  }
  chunk_loop<kDepth>(ptr, write, begin, end, op);
}

// One Adam element: e = {param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq]}.
template <typename T, bool kAmsgrad>
struct AdamOp {
  T inv_scale, weight_decay, decay, beta1, one_minus_beta1, beta2, one_minus_beta2;
  T neg_step_size, sqrt_bias_correction2, eps;
  bool unscale, l2, decoupled;

  __device__ void operator()(T (&e)[kAmsgrad ? 5 : 4]) const {
    T grad = e[1];
    if (unscale) {
      grad = grad * inv_scale;
      e[1] = grad;
    }
    if (l2) grad = grad + weight_decay * e[0];
    e[2] = e[2] * beta1 + one_minus_beta1 * grad;
    const T v = e[3] * beta2 + one_minus_beta2 * grad * grad;
    e[3] = v;
    T root = v;
    if constexpr (kAmsgrad) {
      const T old = e[4];
      root = (v > old || v != v) ? v : old;  // NaN-propagating, as torch::max_out
      e[4] = root;
    }
    root = sqrt(root);
    T param = e[0];
    if (decoupled) param = param * decay;
    const T denom = root / sqrt_bias_correction2 + eps;
    e[0] = param + neg_step_size * (e[2] / denom);
  }
};

template <typename T, bool kAmsgrad>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(AdamMeta meta, AdamArgs h, const float* grad_scale, const float* found_inf) {
  if (skip_step(found_inf)) return;
  constexpr int kDepth = kAmsgrad ? 5 : 4;
  std::int64_t begin = 0, end = 0;
  const int t = block_chunk(meta, &begin, &end);
  const float inv = inverse_scale(grad_scale);
  // Bias corrections in double, from this parameter's own count, as LibTorch.
  const double step = static_cast<double>(*meta.counter[t] + 1);
  const double bc1 = 1.0 - pow(h.beta1, step);
  const double bc2 = 1.0 - pow(h.beta2, step);
  const bool has_decay = h.weight_decay != 0.0;
  const AdamOp<T, kAmsgrad> op{static_cast<T>(inv),
                               static_cast<T>(h.weight_decay),
                               static_cast<T>(1.0 - h.lr * h.weight_decay),
                               static_cast<T>(h.beta1),
                               static_cast<T>(1.0 - h.beta1),
                               static_cast<T>(h.beta2),
                               static_cast<T>(1.0 - h.beta2),
                               static_cast<T>(-(h.lr / bc1)),
                               static_cast<T>(sqrt(bc2)),
                               static_cast<T>(h.eps),
                               inv != 1.0f,
                               has_decay && !h.decoupled,
                               has_decay && h.decoupled};
  T* ptr[kDepth];
  bool write[kDepth];
  for (int d = 0; d < kDepth; ++d) {
    ptr[d] = static_cast<T*>(meta.data[d][t]);
    write[d] = d != 1 || op.unscale;
  }
  chunk_loop<kDepth>(ptr, write, begin, end, op);
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

// Launches `Kernel` over the parameters of one dtype; `set` fills a slot from a parameter.
template <typename Meta, typename Tensors, typename Set, typename LaunchOne>
void launch_dtype(const Tensors* params, const std::vector<std::size_t>& index, const Set& set,
                  const LaunchOne& launch_one) {
  for_each_launch<Meta>(
      index.size(), [&](std::size_t k) { return params[index[k]].param.numel; },
      [&](Meta& meta, int slot, std::size_t k) { set(meta, slot, params[index[k]]); }, launch_one);
}

// The indices of the float32 (0) and float64 (1) parameters.
template <typename Tensors>
void split_by_dtype(const Tensors* params, std::size_t count,
                    std::vector<std::size_t> (&index)[2]) {
  for (std::size_t i = 0; i < count; ++i) {
    index[params[i].param.dtype == DType::kFloat64 ? 1 : 0].push_back(i);
  }
}

}  // namespace

void fused_sgd(const SgdTensors* params, std::size_t count, const SgdHyper& hyper,
               const float* grad_scale, const float* found_inf, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const SgdArgs args{hyper.lr, hyper.momentum, hyper.dampening, hyper.weight_decay, hyper.nesterov};
  const bool momentum = hyper.momentum != 0.0;
  const auto set = [&](SgdMeta& meta, int slot, const SgdTensors& t) {
    meta.data[0][slot] = t.param.data;
    meta.data[1][slot] = t.grad.data;
    meta.data[2][slot] = momentum ? t.momentum_buffer.data : nullptr;
    meta.counter[slot] = t.step_count;
  };
  std::vector<std::size_t> index[2];
  split_by_dtype(params, count, index);
  const auto launch = [&](auto type_tag, auto momentum_tag, const std::vector<std::size_t>& idx) {
    using T = decltype(type_tag);
    constexpr bool kMomentum = decltype(momentum_tag)::value;
    launch_dtype<SgdMeta>(params, idx, set, [&](const SgdMeta& meta, int blocks) {
      sgd_kernel<T, kMomentum><<<blocks, kThreads, 0, s>>>(meta, args, grad_scale, found_inf);
      check(cudaGetLastError(), "sgd_kernel launch");
    });
  };
  if (momentum) {
    launch(float{}, std::true_type{}, index[0]);
    launch(double{}, std::true_type{}, index[1]);
  } else {
    launch(float{}, std::false_type{}, index[0]);
    launch(double{}, std::false_type{}, index[1]);
  }
  std::vector<std::int64_t*> counts;
  for (std::size_t i = 0; i < count; ++i) {
    if (params[i].step_count != nullptr) counts.push_back(params[i].step_count);
  }
  advance_counts(counts, found_inf, s);
}

void fused_adam(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                const float* grad_scale, const float* found_inf, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const AdamArgs args{hyper.lr,  hyper.beta1,        hyper.beta2,
                      hyper.eps, hyper.weight_decay, hyper.decoupled_weight_decay};
  const auto set = [&](AdamMeta& meta, int slot, const AdamTensors& t) {
    meta.data[0][slot] = t.param.data;
    meta.data[1][slot] = t.grad.data;
    meta.data[2][slot] = t.exp_avg.data;
    meta.data[3][slot] = t.exp_avg_sq.data;
    meta.data[4][slot] = hyper.amsgrad ? t.max_exp_avg_sq.data : nullptr;
    meta.counter[slot] = t.step_count;
  };
  std::vector<std::size_t> index[2];
  split_by_dtype(params, count, index);
  const auto launch = [&](auto type_tag, auto amsgrad_tag, const std::vector<std::size_t>& idx) {
    using T = decltype(type_tag);
    constexpr bool kAmsgrad = decltype(amsgrad_tag)::value;
    launch_dtype<AdamMeta>(params, idx, set, [&](const AdamMeta& meta, int blocks) {
      adam_kernel<T, kAmsgrad><<<blocks, kThreads, 0, s>>>(meta, args, grad_scale, found_inf);
      check(cudaGetLastError(), "adam_kernel launch");
    });
  };
  if (hyper.amsgrad) {
    launch(float{}, std::true_type{}, index[0]);
    launch(double{}, std::true_type{}, index[1]);
  } else {
    launch(float{}, std::false_type{}, index[0]);
    launch(double{}, std::false_type{}, index[1]);
  }
  std::vector<std::int64_t*> counts;
  for (std::size_t i = 0; i < count; ++i) counts.push_back(params[i].step_count);
  advance_counts(counts, found_inf, s);
}

}  // namespace mixprec::core::cuda
