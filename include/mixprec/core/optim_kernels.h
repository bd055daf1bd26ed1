// Fused optimizer kernels of the core (SGD, Adam, AdamW): unscale, skip-on-inf and the update
// in one pass over each parameter's memory. Framework-free: the LibTorch optimizers in
// include/mixprec/optim/ are thin adapters over these functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/core/tensor_view.h"

namespace mixprec::core {

/// Hyper-parameters of fused_sgd_, with the meaning of LibTorch's torch::optim::SGDOptions.
struct SgdHyper {
  double lr = 0.0;            ///< learning rate
  double momentum = 0.0;      ///< momentum factor; 0 disables the momentum buffer
  double dampening = 0.0;     ///< dampening of the momentum (not applied on the first step)
  double weight_decay = 0.0;  ///< L2 penalty added to the gradient
  bool nesterov = false;      ///< Nesterov momentum
};

/// One parameter of fused_sgd_: four views of equal size and dtype, element i of each belonging
/// to the same parameter element.
struct SgdTensors {
  TensorView param;            ///< updated in place
  TensorView grad;             ///< unscaled in place when a grad_scale is given
  TensorView momentum_buffer;  ///< ignored when momentum == 0
  /// CPU: the buffer holds no history yet (its content is ignored and it is set to the
  /// gradient, as LibTorch's SGD clones the first gradient into a new buffer).
  bool first_step = false;
  /// CUDA (required with momentum, optional without): device pointer to this parameter's count
  /// of applied steps (one int64). The buffer counts as empty, as with first_step, while the
  /// count is 0; the kernels add 1 when the step is applied. Ignored on the CPU.
  std::int64_t* step_count = nullptr;
};

/// Hyper-parameters of fused_adam_, with the meaning of torch::optim::AdamOptions/AdamWOptions.
struct AdamHyper {
  double lr = 1e-3;           ///< learning rate
  double beta1 = 0.9;         ///< decay of the first moment
  double beta2 = 0.999;       ///< decay of the second moment
  double eps = 1e-8;          ///< added to the denominator
  double weight_decay = 0.0;  ///< L2 penalty (Adam) or decoupled decay (AdamW)
  bool amsgrad = false;       ///< use the running maximum of the second moment
  /// AdamW: multiply the parameter by (1 - lr * weight_decay) instead of adding
  /// weight_decay * param to the gradient.
  bool decoupled_weight_decay = false;
};

/// One parameter of fused_adam_: views of equal size and dtype, element i of each belonging to
/// the same parameter element.
struct AdamTensors {
  TensorView param;           ///< updated in place
  TensorView grad;            ///< unscaled in place when a grad_scale is given
  TensorView exp_avg;         ///< first moment, updated in place
  TensorView exp_avg_sq;      ///< second moment, updated in place
  TensorView max_exp_avg_sq;  ///< running max of the second moment; used only with amsgrad
  /// CPU: the number of this step for this parameter, counting from 1 (LibTorch's
  /// state.step() + 1): it sets the bias corrections. The caller advances its counter only when
  /// the call returns true. Ignored on CUDA.
  std::int64_t step = 1;
  /// CUDA (required): device pointer to this parameter's count of applied steps (one int64,
  /// LibTorch's state.step()). The kernel takes *step_count + 1 as the step and adds 1 to the
  /// count when the step is applied. Ignored on the CPU.
  std::int64_t* step_count = nullptr;
};

/// One fused SGD step (LibTorch 1.13's torch::optim::SGD math) over `count` parameters.
///
/// - `found_inf` (may be null): when it points to a non-zero value (any value, not only 1; see
///   Note [found_inf is 0 or 1] in src/torch/scaler/grad_scaler.cpp) nothing is written at all, step
///   counts included.
/// - `grad_scale` (may be null): each gradient element is multiplied by
///   `float(1.0 / double(*grad_scale))`, the inverse GradScaler::unscale_() uses, and the result
///   is written back to the gradient, in the same loop as the update; nothing is written to the
///   gradient when that inverse is 1.
/// - `clip_coef` (may be null; on the parameters' device): the gradient clipping coefficient
///   (clip_kernels.h). The gradient becomes fl(fl(g * inverse) * *clip_coef), fp16/bf16 rounded
///   to their type after each multiply, as PyTorch's unscale_ then clip_grads_with_norm_ leave
///   it, and is written back; the update reads that value.
/// - Otherwise the update is, per element, with d = grad (+ weight_decay * param):
///   buf = first_step ? d : momentum * buf + (1 - dampening) * d;
///   d = nesterov ? d + momentum * buf : buf; param -= lr * d.
///
/// Views are float32 or float64, or on the CPU also float16 or bfloat16 (computed in float,
/// rounded to nearest even once per store), one dtype per parameter, all on one device, where
/// `grad_scale` and `found_inf` live too:
/// - CPU: returns true when the update was applied. Runs on up to get_num_threads() threads
///   (kernels.h); results do not depend on the thread count.
/// - CUDA: multi-tensor launches on `stream` (a cudaStream_t; nullptr is the default stream) of
///   the current device. The host never reads found_inf: the kernels decide on the device, and
///   the call returns true once they are queued (read step_count to learn the outcome). Nothing
///   synchronises, so the call can be captured in a CUDA graph.
///
/// Throws mixprec::core::Error on invalid arguments, before anything is written or launched.
///
/// **Example**
/// ```cpp
/// float found_inf = 0.0f, scale = 65536.0f;
/// mixprec::core::SgdTensors t{{w.data(), n}, {g.data(), n}, {buf.data(), n}, /*first_step=*/true};
/// mixprec::core::SgdHyper hyper;
/// hyper.lr = 0.1;
/// hyper.momentum = 0.9;
/// bool stepped = mixprec::core::fused_sgd_(&t, 1, hyper, &scale, &found_inf);
/// ```
bool fused_sgd_(const SgdTensors* params, std::size_t count, const SgdHyper& hyper,
                const float* grad_scale, const float* found_inf, void* stream = nullptr,
                const float* clip_coef = nullptr);

/// One fused Adam or AdamW step (LibTorch 1.13's torch::optim::Adam / AdamW math) over `count`
/// parameters. `found_inf`, `grad_scale`, devices, `stream` and the return value are as in
/// fused_sgd_. The update is, per element, with g = grad and bias corrections
/// bc1 = 1 - beta1^step, bc2 = 1 - beta2^step:
///   Adam:  g += weight_decay * param;   AdamW: param *= 1 - lr * weight_decay;
///   m = beta1 * m + (1 - beta1) * g;    v = beta2 * v + (1 - beta2) * g * g;
///   vmax = max(vmax, v) (amsgrad);      param -= lr / bc1 * m / (sqrt(v or vmax) / sqrt(bc2) +
///   eps).
/// On the CPU it returns true when the update was applied; the caller then advances each step
/// counter. On CUDA the kernels advance the device step counts themselves.
bool fused_adam_(const AdamTensors* params, std::size_t count, const AdamHyper& hyper,
                 const float* grad_scale, const float* found_inf, void* stream = nullptr,
                 const float* clip_coef = nullptr);

}  // namespace mixprec::core
