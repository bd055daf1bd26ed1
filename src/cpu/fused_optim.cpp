// CPU fused optimizer kernels (include/mixprec/core/optim_kernels.h; the dispatch point,
// src/core/kernels.cpp, checks the arguments): one pass over each parameter's memory that
// unscales the gradient, applies the SGD or Adam(W) math and writes parameter, gradient and
// moments back. Elementwise, so split over threads freely.
#include "cpu/fused_optim.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/element_ops.h"
#include "cpu/fused_optim_simd.h"
#include "cpu/threads.h"

namespace mixprec::core::cpu {
namespace {

// Note [Fused unscale multiplies by the inverse]
// PyTorch's fused kernels divide each gradient by grad_scale, GradScaler::unscale_() multiplies
// it by float(1 / double(scale)). For the powers of two GradScaler produces both are exact and
// equal; for any other scale the multiply is what the regular path does, so a fused step and
// unscale_() + a LibTorch optimizer's step() see bit-identical gradients.

constexpr std::int64_t kTaskElements = 32 * 1024;  // one task of a thread, ~0.5 MB of traffic
// Below this many elements per thread, waking threads costs more than it saves.
constexpr std::int64_t kMinElementsPerThread = 128 * 1024;

// Calls body(i, begin, end) over every element of `numels[i]` for all i. Large views are cut
// into tasks of kTaskElements that OpenMP threads take one at a time (the cost depends on the
// elements, not on the tensors, as in Note [Chunking across tensors] of src/cpu/unscale.cpp; the
// static runs used there measured no faster for these steps, whose time varied more between runs
// than between the two schedules). Each element is computed the same way whichever thread takes
// it, so results do not depend on the thread count. body must not throw.
template <typename Body>
void parallel_over_elements(const std::vector<std::int64_t>& numels, const Body& body) {
  std::int64_t total = 0;
  for (std::int64_t n : numels) total += n;
  const std::int64_t threads =
      std::min<std::int64_t>(cpu::max_threads(), total / kMinElementsPerThread);
#ifdef _OPENMP
  if (threads > 1) {
    struct Task {
      std::size_t view;
      std::int64_t begin, end;
    };
    std::vector<Task> tasks;
    for (std::size_t i = 0; i < numels.size(); ++i) {
      for (std::int64_t b = 0; b < numels[i]; b += kTaskElements) {
        tasks.push_back({i, b, std::min(b + kTaskElements, numels[i])});
      }
    }
    const auto count = static_cast<std::int64_t>(tasks.size());
#pragma omp parallel for num_threads(static_cast <int>(threads)) schedule(dynamic, 1)
    for (std::int64_t t = 0; t < count; ++t) {
      const Task& task = tasks[static_cast<std::size_t>(t)];
      body(task.view, task.begin, task.end);
    }
    return;
  }
#else
  (void)threads;
#endif
  for (std::size_t i = 0; i < numels.size(); ++i) body(i, 0, numels[i]);
}

template <typename S>
S* data_of(const TensorView& v, std::int64_t offset) {
  return v.data == nullptr ? nullptr : static_cast<S*>(v.data) + offset;
}

// The element op's scalars come from src/core/element_ops.h, which the CUDA kernels use too: one
// derivation of the optimizer scalars for both devices (in the parameter's type; float for
// fp16/bf16, which compute in float).
template <typename T>
void run_sgd(const SgdTensors* params, const std::vector<std::size_t>& index,
             const std::vector<std::int64_t>& numels, const SgdHyper& h, float inv_scale,
             const float* clip_coef) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // the compute type
  const SgdOp<S, true> op = make_sgd_op<S, true>(h, inv_scale, nullptr, clip_coef);
  const bool momentum = h.momentum != 0.0;
  parallel_over_elements(numels, [&](std::size_t k, std::int64_t begin, std::int64_t end) {
    const SgdTensors& t = params[index[k]];
    SgdOp<S, true> span_op = op;
    span_op.first = t.first_step;
    const SgdSpan<T> span{data_of<T>(t.param, begin), data_of<T>(t.grad, begin),
                          momentum ? data_of<T>(t.momentum_buffer, begin) : nullptr, end - begin};
    if constexpr (std::is_same_v<T, std::uint16_t>) {
      sgd_span(span, t.param.dtype, span_op, momentum);
    } else {
      sgd_span(span, span_op, momentum);
    }
  });
}

template <typename T>
void run_adam(const AdamTensors* params, const std::vector<std::size_t>& index,
              const std::vector<std::int64_t>& numels, const AdamHyper& h, float inv_scale,
              const float* clip_coef) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  parallel_over_elements(numels, [&](std::size_t k, std::int64_t begin, std::int64_t end) {
    const AdamTensors& t = params[index[k]];
    // Bias corrections in double, from this parameter's own step count, as LibTorch.
    const AdamOp<S, false> op = make_adam_op<S, false>(h, inv_scale, t.step, clip_coef);
    const AdamSpan<T> span{data_of<T>(t.param, begin),
                           data_of<T>(t.grad, begin),
                           data_of<T>(t.exp_avg, begin),
                           data_of<T>(t.exp_avg_sq, begin),
                           h.amsgrad ? data_of<T>(t.max_exp_avg_sq, begin) : nullptr,
                           end - begin};
    if constexpr (std::is_same_v<T, std::uint16_t>) {
      adam_span(span, t.param.dtype, op, h.amsgrad);
    } else {
      adam_span(span, op, h.amsgrad);
    }
  });
}

// Groups the parameters by storage: indices and element counts of the float32, float64 and
// 16-bit (fp16 and bf16) ones.
template <typename Tensors>
void split_by_dtype(const Tensors* params, std::size_t count, std::vector<std::size_t> index[3],
                    std::vector<std::int64_t> numels[3]) {
  for (std::size_t i = 0; i < count; ++i) {
    const DType dtype = params[i].param.dtype;
    const int d = dtype == DType::kFloat32 ? 0 : dtype == DType::kFloat64 ? 1 : 2;
    index[d].push_back(i);
    numels[d].push_back(params[i].param.numel);
  }
}

}  // namespace

void fused_sgd(const SgdTensors* params, std::size_t count, const SgdHyper& hyper, float inv_scale,
               const float* clip_coef) {
  std::vector<std::size_t> index[3];
  std::vector<std::int64_t> numels[3];
  split_by_dtype(params, count, index, numels);
  if (!index[0].empty()) run_sgd<float>(params, index[0], numels[0], hyper, inv_scale, clip_coef);
  if (!index[1].empty()) run_sgd<double>(params, index[1], numels[1], hyper, inv_scale, clip_coef);
  if (!index[2].empty()) {
    run_sgd<std::uint16_t>(params, index[2], numels[2], hyper, inv_scale, clip_coef);
  }
}

void fused_adam(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                float inv_scale, const float* clip_coef) {
  std::vector<std::size_t> index[3];
  std::vector<std::int64_t> numels[3];
  split_by_dtype(params, count, index, numels);
  if (!index[0].empty()) run_adam<float>(params, index[0], numels[0], hyper, inv_scale, clip_coef);
  if (!index[1].empty()) run_adam<double>(params, index[1], numels[1], hyper, inv_scale, clip_coef);
  if (!index[2].empty()) {
    run_adam<std::uint16_t>(params, index[2], numels[2], hyper, inv_scale, clip_coef);
  }
}

}  // namespace mixprec::core::cpu
