// mixprec::GradScaler: torch.amp.GradScaler for LibTorch, method for method.
// Behaviour is PyTorch's (see docs/python_to_cpp.md for the side-by-side table and the few
// deliberate differences).
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

#include "mixprec/grad_scaler_options.h"

namespace mixprec {

/// Where an optimizer is in the current iteration (PyTorch's OptState).
enum class OptState { kReady = 0, kUnscaled = 1, kStepped = 2 };

/// One found_inf tensor per device, in the order the devices were first seen.
using FoundInfPerDevice = std::vector<std::pair<c10::Device, at::Tensor>>;

/// Dynamic loss scaling for mixed-precision training, as torch.amp.GradScaler.
///
/// Multiply the loss by a scale so that small fp16 gradients do not flush to zero, unscale and
/// check the gradients for inf/NaN, skip the optimizer step when they overflowed, back the scale
/// off, and grow it again after growth_interval clean steps.
///
/// **Example**
/// ```cpp
/// mixprec::GradScaler scaler;
/// for (auto& batch : *loader) {
///   optimizer.zero_grad();
///   torch::Tensor loss;
///   {
///     mixprec::AutocastGuard autocast(torch::kCUDA);
///     loss = torch::mse_loss(model->forward(batch.data), batch.target);
///   }
///   scaler.scale(loss).backward();
///   scaler.step(optimizer);   // skipped when the gradients hold inf/NaN
///   scaler.update();
/// }
/// ```
///
/// The scale (a 0-dim float32 tensor) and the growth tracker (0-dim int32) are created on the
/// device of the first tensor given to scale(); scale(), unscale_() and update() never wait for
/// the device. step() reads found_inf to the host once per device, unless the optimizer derives
/// from mixprec::SupportsAmpScaling, which skips by itself without a sync. Optimizers are told
/// apart by their address. Not thread-safe: use one scaler per training loop.
class GradScaler {
 public:
  /// A scaler with all defaults (init_scale 2^16, growth 2, backoff 0.5, interval 2000).
  GradScaler();
  /// Throws c10::Error, naming the option and value, when the scaler is enabled and
  /// init_scale is not finite or <= 0, growth_factor <= 1, backoff_factor is outside (0, 1)
  /// or growth_interval < 1.
  explicit GradScaler(GradScalerOptions options);

  GradScaler(GradScaler&&) noexcept;
  GradScaler& operator=(GradScaler&&) noexcept;
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;
  ~GradScaler();

  /// `outputs * scale` (autograd-tracked). The first call creates the scale on outputs' device.
  /// Disabled: returns `outputs` itself.
  at::Tensor scale(const at::Tensor& outputs);
  /// Each output times the scale (one copy of the scale per device).
  std::vector<at::Tensor> scale(const std::vector<at::Tensor>& outputs);

  /// Divides the optimizer's gradients in place by the scale and records, per device, whether any
  /// held inf/NaN. Call at most once per optimizer between update()s, after all backward passes
  /// (e.g. before clipping). Throws for fp16 gradients ("Attempting to unscale FP16 gradients.").
  void unscale_(torch::optim::Optimizer& optimizer);

  /// Unscales (if unscale_ was not called) and runs optimizer.step() unless a gradient held
  /// inf/NaN. Returns step()'s result, or an undefined tensor when the step was skipped.
  at::Tensor step(torch::optim::Optimizer& optimizer);

  /// Backs the scale off if any step of this iteration saw inf/NaN, else counts a clean step and
  /// grows the scale every growth_interval clean steps. Resets every optimizer to kReady.
  void update();
  /// Sets the scale to `new_scale` (the growth tracker is left alone).
  void update(double new_scale);
  /// Sets the scale to the value of a 1-element tensor on the scale's device type, without
  /// requires_grad; later changes to the tensor do not affect the scaler.
  void update(const at::Tensor& new_scale);

  /// The scale: init_scale before the first scale(), 1.0 when disabled. Reads the scale tensor
  /// to the host (a device sync on CUDA).
  double get_scale() const;
  /// The scale tensor itself, without a sync (undefined before the first scale() or when disabled).
  at::Tensor get_scale_async() const;
  /// Consecutive clean steps counted towards the next growth (a device sync on CUDA).
  std::int64_t get_growth_tracker() const;
  /// Growth factor; set_ takes effect at the next update() and is not validated (as PyTorch).
  double get_growth_factor() const;
  void set_growth_factor(double new_factor);
  /// Backoff factor; set_ takes effect at the next update() and is not validated (as PyTorch).
  double get_backoff_factor() const;
  void set_backoff_factor(double new_factor);
  /// Growth interval; set_ takes effect at the next update() and is not validated (as PyTorch).
  std::int64_t get_growth_interval() const;
  void set_growth_interval(std::int64_t new_interval);
  /// Whether scaling is on.
  bool is_enabled() const;

  /// The stage `optimizer` has reached in this iteration (kReady if the scaler has not seen it).
  OptState stage(const torch::optim::Optimizer& optimizer) const;
  /// The found_inf tensors recorded for `optimizer` in this iteration (empty if none).
  FoundInfPerDevice found_inf_per_device(const torch::optim::Optimizer& optimizer) const;

  /// PyTorch-compatible state: "scale" (double), "growth_factor" (double), "backoff_factor"
  /// (double), "growth_interval" (int), "_growth_tracker" (int), in this order; empty when
  /// disabled. Saved with torch::pickle_save it loads in Python as scaler.state_dict() does.
  c10::impl::GenericDict state_dict() const;
  /// Loads a state_dict() (also one saved from Python). Disabled: a no-op. Throws, leaving the
  /// scaler as it was, for an empty dict ("The source state dict is empty, ..."), a missing key
  /// or a value of the wrong type (naming the key).
  void load_state_dict(const c10::impl::GenericDict& state_dict);

 private:
  struct PerOptimizerState {
    const void* optimizer = nullptr;
    OptState stage = OptState::kReady;
    FoundInfPerDevice found_inf_per_device;
  };

  std::pair<at::Tensor, at::Tensor> check_scale_growth_tracker(const char* funcname) const;
  void lazy_init_scale_growth_tracker(c10::Device device);
  PerOptimizerState& state_for(const torch::optim::Optimizer& optimizer);
  const PerOptimizerState* find_state(const torch::optim::Optimizer& optimizer) const;
  at::Tensor step_fused(torch::optim::Optimizer& optimizer, PerOptimizerState& state);

  GradScalerOptions options_;
  double init_scale_;
  std::int64_t init_growth_tracker_ = 0;
  at::Tensor scale_;           // 0-dim float32, created by the first scale()
  at::Tensor growth_tracker_;  // 0-dim int32, created with scale_
  std::vector<PerOptimizerState> per_optimizer_states_;  // in first-seen order
};

/// One line with plain numbers, e.g.
/// `GradScaler(scale=65536, growth_factor=2, backoff_factor=0.5, growth_interval=2000, enabled=true)`.
/// Reads the scale (a device sync on CUDA).
std::ostream& operator<<(std::ostream& out, const GradScaler& scaler);

}  // namespace mixprec
