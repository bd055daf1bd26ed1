// CPU fused optimizer kernels (include/mixprec/core/optim_kernels.h; the dispatch point,
// src/core/kernels.cpp, checks the arguments): one pass over each parameter's memory that
// unscales the gradient, applies the SGD or Adam(W) math and writes parameter, gradient and
// moments back. Elementwise, so split over threads freely.
#include "cpu/fused_optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/element_ops.h"
#include "cpu/threads.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__AVX__)
#include <immintrin.h>
#endif

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error \
    "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

namespace mixprec::core::cpu {
namespace {

// Note [Fused unscale multiplies by the inverse]
// PyTorch's fused kernels divide each gradient by grad_scale, GradScaler::unscale_() multiplies
// it by float(1 / double(scale)). For the powers of two GradScaler produces both are exact and
// equal; for any other scale the multiply is what the regular path does, so a fused step and
// unscale_() + a LibTorch optimizer's step() see bit-identical gradients.

// Note [Adam's square root in its own loop]
// Without -ffast-math, GCC and Clang keep std::sqrt's errno path (a branch and a libm call for
// negative inputs), which stops the loop vectoriser, and neither `optimize` attributes nor
// pragmas lift it in GCC 12. So the Adam loop runs in L1-sized blocks: one vectorised loop for
// the moments, the square roots of the block with explicit SIMD (IEEE sqrt is correctly
// rounded, so identical to the scalar one), and one vectorised loop for the parameter.

constexpr std::int64_t kBlock = 256;  // elements per Adam block: six arrays of it stay in L1
constexpr std::int64_t kTaskElements = 32 * 1024;  // one task of a thread, ~0.5 MB of traffic
// Below this many elements per thread, waking threads costs more than it saves.
constexpr std::int64_t kMinElementsPerThread = 128 * 1024;

template <typename T>
void sqrt_block(T* x, std::int64_t n) {
  std::int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
#if defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
#if defined(__SSE2__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  } else {
#if defined(__AVX__)
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
#endif
#if defined(__SSE2__)
    for (; i + 2 <= n; i += 2) _mm_storeu_pd(x + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
#endif
  }
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// The scalars of a step, in the parameter's type (rounded from double as LibTorch rounds Scalar
// arguments), come from the element ops of src/core/element_ops.h, which the CUDA kernels use
// too: one derivation of the optimizer scalars for both devices.
template <typename T>
using SgdCoeffs = SgdOp<T, true>;
template <typename T>
using AdamCoeffs = AdamOp<T, false>;

enum class Momentum { kNone, kFirst, kRunning };

template <typename T, bool kUnscale, bool kDecay, Momentum kMomentum, bool kNesterov>
void sgd_span(T* __restrict p, T* __restrict g, T* __restrict buf, std::int64_t n,
              const SgdCoeffs<T>& c) {
  const SgdCoeffs<T> k = c;  // a local copy keeps the coefficients in registers
  for (std::int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if constexpr (kUnscale) {
      d = d * k.inv_scale;
      g[i] = d;
    }
    const T param = p[i];
    if constexpr (kDecay) d = d + k.weight_decay * param;
    if constexpr (kMomentum != Momentum::kNone) {
      T b = d;  // LibTorch clones the first gradient into the buffer: no dampening then
      if constexpr (kMomentum == Momentum::kRunning)
        b = buf[i] * k.momentum + k.one_minus_dampening * d;
      buf[i] = b;
      if constexpr (kNesterov) {
        d = d + k.momentum * b;
      } else {
        d = b;
      }
    }
    p[i] = param + k.neg_lr * d;
  }
}

template <typename T, bool kUnscale, bool kDecay, bool kDecoupled, bool kAmsgrad>
void adam_span(T* __restrict p, T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict vmax, std::int64_t n, const AdamCoeffs<T>& c) {
  const AdamCoeffs<T> k = c;
  alignas(64) T root[kBlock];
  for (std::int64_t base = 0; base < n; base += kBlock) {
    const std::int64_t len = std::min(kBlock, n - base);
    T* __restrict pb = p + base;
    T* __restrict gb = g + base;
    T* __restrict mb = m + base;
    T* __restrict vb = v + base;
    T* __restrict xb = kAmsgrad ? vmax + base : nullptr;
    for (std::int64_t i = 0; i < len; ++i) {
      T grad = gb[i];
      if constexpr (kUnscale) {
        grad = grad * k.inv_scale;
        gb[i] = grad;
      }
      if constexpr (kDecay && !kDecoupled) grad = grad + k.weight_decay * pb[i];
      mb[i] = mb[i] * k.beta1 + k.one_minus_beta1 * grad;
      const T vi = vb[i] * k.beta2 + k.one_minus_beta2 * grad * grad;
      vb[i] = vi;
      if constexpr (kAmsgrad) {
        const T old = xb[i];
        const T mx = (vi > old || vi != vi) ? vi : old;  // NaN-propagating, as torch::max_out
        xb[i] = mx;
        root[i] = mx;
      } else {
        root[i] = vi;
      }
    }
    sqrt_block(root, len);  // See Note [Adam's square root in its own loop]
    for (std::int64_t i = 0; i < len; ++i) {
      T param = pb[i];
      if constexpr (kDecay && kDecoupled) param = param * k.decay;
      const T denom = root[i] / k.sqrt_bias_correction2 + k.eps;
      pb[i] = param + k.neg_step_size * (mb[i] / denom);
    }
  }
}

// Calls f(std::integral_constant<bool, b>) so a runtime flag becomes a template argument.
template <typename F>
void with_bool(bool b, F&& f) {
  if (b) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// Calls body(i, begin, end) over every element of `numels[i]` for all i. Large views are cut
// into tasks of kTaskElements that OpenMP threads take dynamically (as in src/cpu/unscale.cpp,
// Note [Chunking across tensors]); each element is computed the same way whichever thread takes
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

template <typename T>
T* data_of(const TensorView& v) {
  return static_cast<T*>(v.data);
}

template <typename T>
void run_sgd(const SgdTensors* params, const std::vector<std::size_t>& index,
             const std::vector<std::int64_t>& numels, const SgdHyper& h, float inv_scale) {
  const SgdCoeffs<T> c = make_sgd_op<T, true>(h, inv_scale, nullptr);
  const bool unscale = inv_scale != 1.0f, decay = h.weight_decay != 0.0;
  parallel_over_elements(numels, [&](std::size_t k, std::int64_t begin, std::int64_t end) {
    const SgdTensors& t = params[index[k]];
    T* p = data_of<T>(t.param) + begin;
    T* g = data_of<T>(t.grad) + begin;
    T* buf = h.momentum != 0.0 ? data_of<T>(t.momentum_buffer) + begin : nullptr;
    const Momentum mode = h.momentum == 0.0 ? Momentum::kNone
                          : t.first_step    ? Momentum::kFirst
                                            : Momentum::kRunning;
    with_bool(unscale, [&](auto u) {
      with_bool(decay, [&](auto d) {
        with_bool(h.nesterov, [&](auto nest) {
          constexpr bool kU = decltype(u)::value, kD = decltype(d)::value;
          constexpr bool kN = decltype(nest)::value;
          switch (mode) {
            case Momentum::kNone:
              sgd_span<T, kU, kD, Momentum::kNone, false>(p, g, buf, end - begin, c);
              break;
            case Momentum::kFirst:
              sgd_span<T, kU, kD, Momentum::kFirst, kN>(p, g, buf, end - begin, c);
              break;
            case Momentum::kRunning:
              sgd_span<T, kU, kD, Momentum::kRunning, kN>(p, g, buf, end - begin, c);
              break;
          }
        });
      });
    });
  });
}

template <typename T>
void run_adam(const AdamTensors* params, const std::vector<std::size_t>& index,
              const std::vector<std::int64_t>& numels, const AdamHyper& h, float inv_scale) {
  const bool unscale = inv_scale != 1.0f, decay = h.weight_decay != 0.0;
  parallel_over_elements(numels, [&](std::size_t k, std::int64_t begin, std::int64_t end) {
    const AdamTensors& t = params[index[k]];
    // Bias corrections in double, from this parameter's own step count, as LibTorch.
    const AdamCoeffs<T> c = make_adam_op<T, false>(h, inv_scale, t.step);
    T* p = data_of<T>(t.param) + begin;
    T* g = data_of<T>(t.grad) + begin;
    T* m = data_of<T>(t.exp_avg) + begin;
    T* v = data_of<T>(t.exp_avg_sq) + begin;
    T* vmax = h.amsgrad ? data_of<T>(t.max_exp_avg_sq) + begin : nullptr;
    with_bool(unscale, [&](auto u) {
      with_bool(decay, [&](auto d) {
        with_bool(h.decoupled_weight_decay, [&](auto dec) {
          with_bool(h.amsgrad, [&](auto ams) {
            adam_span<T, decltype(u)::value, decltype(d)::value, decltype(dec)::value,
                      decltype(ams)::value>(p, g, m, v, vmax, end - begin, c);
          });
        });
      });
    });
  });
}

// Splits the parameters by dtype: indices and element counts of the float32 and float64 ones.
template <typename Tensors>
void split_by_dtype(const Tensors* params, std::size_t count, std::vector<std::size_t> index[2],
                    std::vector<std::int64_t> numels[2]) {
  for (std::size_t i = 0; i < count; ++i) {
    const int d = params[i].param.dtype == DType::kFloat64 ? 1 : 0;
    index[d].push_back(i);
    numels[d].push_back(params[i].param.numel);
  }
}

}  // namespace

void fused_sgd(const SgdTensors* params, std::size_t count, const SgdHyper& hyper,
               float inv_scale) {
  std::vector<std::size_t> index[2];
  std::vector<std::int64_t> numels[2];
  split_by_dtype(params, count, index, numels);
  if (!index[0].empty()) run_sgd<float>(params, index[0], numels[0], hyper, inv_scale);
  if (!index[1].empty()) run_sgd<double>(params, index[1], numels[1], hyper, inv_scale);
}

void fused_adam(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                float inv_scale) {
  std::vector<std::size_t> index[2];
  std::vector<std::int64_t> numels[2];
  split_by_dtype(params, count, index, numels);
  if (!index[0].empty()) run_adam<float>(params, index[0], numels[0], hyper, inv_scale);
  if (!index[1].empty()) run_adam<double>(params, index[1], numels[1], hyper, inv_scale);
}

}  // namespace mixprec::core::cpu
