// mixprec::GradScaler: torch.amp.GradScaler for LibTorch, method for method.
// Behaviour is PyTorch's (see docs/python_to_cpp.md for the side-by-side table and the few
// deliberate differences).
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mixprec/grad_scaler_options.h"
#include "mixprec/telemetry.h"

namespace torch::nn {
class Module;
}
namespace mixprec::detail {
struct GradNorm;  // src/torch/ops/clip_detail.h
}

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
/// device of the first tensor given to scale(); with the defaults, scale(), unscale_() and update()
/// never wait for the device. step() reads found_inf to the host once per device, unless the
/// optimizer derives from mixprec::SupportsAmpScaling, which skips by itself without a sync.
/// Options beyond PyTorch can wait: a found_inf reducer runs its collective (and a Gloo one
/// copies found_inf to the host) in unscale_() or step(); diagnose_overflow(true) reads found_inf
/// in unscale_() (and step() on the fused path); at_min_scale other than kClamp, or an event
/// callback, makes update() read the counters. Each is a device sync on CUDA. Optimizers are told
/// apart by their address. Not thread-safe: use one scaler per training loop.
class GradScaler {
 public:
  /// A scaler with all defaults (init_scale 2^16, growth 2, backoff 0.5, interval 2000).
  GradScaler();
  /// Throws c10::Error, naming the option and value, when the scaler is enabled and
  /// init_scale is not finite or <= 0, growth_factor <= 1, backoff_factor is outside (0, 1)
  /// or growth_interval < 1.
  explicit GradScaler(GradScalerOptions options);

  /// Movable (state, options and callbacks move along); not copyable, because a copy would share
  /// the device tensors of the scale.
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

  /// Beyond PyTorch, for training code without a torch::optim::Optimizer (the C ABI's
  /// gradient-list path): divides `grads` in place by the scale and records whether any held
  /// inf/NaN, as unscale_ does for an optimizer's gradients (the reducer included); the next
  /// update() counts it. Undefined grads are skipped; fp16 grads throw as in unscale_. May be
  /// called for several lists in one iteration; a gradient already unscaled since the last
  /// update() (by this call, unscale_ or step) throws, as dividing it twice would. A call that
  /// throws may have divided some grads: skip the step and set the scale with update(new_scale).
  /// Returns a copy of found_inf (0 or 1, float32, on the scale's device, no sync): skip the
  /// parameter update when it is not 0. Disabled: a zero on the grads' device.
  at::Tensor unscale_grads_(const std::vector<at::Tensor>& grads);
  /// Unscales (if unscale_ was not called) and runs optimizer.step() unless a gradient held
  /// inf/NaN. Returns step()'s result, or an undefined tensor when the step was skipped.
  at::Tensor step(torch::optim::Optimizer& optimizer);
  /// As Python's scaler.step(optimizer, closure=closure): a disabled scaler returns
  /// optimizer.step(closure); an enabled one throws "Closure use is not currently supported if
  /// GradScaler is enabled." (a closure re-runs backward, which the scale does not reach).
  at::Tensor step(torch::optim::Optimizer& optimizer,
                  const torch::optim::Optimizer::LossClosure& closure);

  /// PyTorch's `unscale_(optimizer)` + `clip_grad_norm_(params, max_norm, norm_type)` in fewer
  /// passes: one read of the scaled grads records found_inf (as unscale_ does, reducer and
  /// diagnostics included) and the total norm of the unscaled grads (mixprec::get_total_norm's
  /// accuracy), and `optimizer` becomes kUnscaled, so unscale_() after it throws as in PyTorch.
  /// - A mixprec fused optimizer (SupportsAmpScaling) gets the scale and the coefficient and
  ///   applies both in its step's single pass; the grads stay scaled until that step(), which
  ///   writes them back unscaled and clipped.
  /// - Any other optimizer gets its grads unscaled and clipped now, in one read-write pass.
  /// Either way the step sees, bit for bit, the grads of PyTorch's unscale_ then
  /// clip_grads_with_norm_(params, max_norm, norm) for this norm, whatever the scale. A step
  /// skipped on inf/NaN leaves parameters and state untouched. norm_type other than 2 and inf
  /// unscales first (unscale_) and clips in a second pass. Returns the unscaled total norm
  /// (0-dim float32, no host sync). Disabled: mixprec::clip_grad_norm_ of the parameters.
  /// Throws for fp16 grads ("Attempting to unscale FP16 gradients.") and sparse grads.
  at::Tensor clip_grad_norm_(torch::optim::Optimizer& optimizer, double max_norm,
                             double norm_type = 2.0);
  /// Combines clip_grad_norm_'s local result across processes in place, for parameters sharded
  /// over ranks (FSDP style; under DDP the grads are already averaged and no reducer is needed):
  /// `power_and_found` is a 2-element float64 tensor on the scale's device, [the sum of |u|^p
  /// (u^2 for p = 2) or max |u| (p = inf), found_inf (0 or 1)]. After it, the norm is taken from
  /// element 0 and every found_inf of this clip from element 1, which stands for the found_inf
  /// reducer (not run again for this optimizer). mixprec::distributed::grad_norm_reducer(group)
  /// does it in one all-reduce. An empty reducer removes it.
  using GradNormReducer = std::function<void(at::Tensor& power_and_found, double norm_type)>;
  void set_grad_norm_reducer(GradNormReducer reducer);
  /// The norms clip_grad_norm_ returned, oldest first: at most history_size() of them, or the
  /// last one when history_size is 0 (a device sync on CUDA).
  std::vector<double> grad_norm_history() const;

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

  // ---- beyond PyTorch (docs/options.md) ----

  /// Combines a found_inf tensor across processes in place (MAX, so it stays 0 or 1).
  using FoundInfReducer = std::function<void(at::Tensor& found_inf)>;
  /// Makes every found_inf this scaler records (by unscale_, or by step() for a
  /// SupportsAmpScaling optimizer) pass through `reducer` before any skip decision, so that all
  /// data-parallel ranks skip or step together and keep identical scales. See
  /// mixprec/distributed.h for c10d process groups; any communicator can be plugged in here.
  /// An empty reducer removes it.
  void set_found_inf_reducer(FoundInfReducer reducer);

  /// Whether the last step() on `optimizer` applied the update (false: skipped on inf/NaN). Known
  /// without a device sync on the regular path; for a SupportsAmpScaling optimizer it reads
  /// found_inf (a sync on CUDA). Survives the update() that ends its iteration, not one that
  /// ends an iteration without a step() of `optimizer`; false if step() was never called (or
  /// not since then; true for a disabled scaler, which never skips). A new optimizer at a dead
  /// one's address over other parameters is not taken for it.
  bool last_step_applied(const torch::optim::Optimizer& optimizer) const;
  /// The found_inf (0 or 1, float32) the last step() on `optimizer` decided with, on the scale's
  /// device, without a sync (undefined if step() was never called).
  at::Tensor last_step_found_inf(const torch::optim::Optimizer& optimizer) const;

  /// The telemetry counters (a device sync on CUDA; zeros before the first scale()).
  ScalerTelemetry telemetry() const;
  /// The last history_size (iteration, scale, overflow) rows, oldest first (a sync on CUDA).
  std::vector<ScaleHistoryEntry> history() const;
  /// Calls `callback` after every update() with what it did (backoff, growth, skip, reaching
  /// min/max). With callbacks registered, update() reads the counters: a device sync on CUDA.
  void on_event(std::function<void(const ScaleEventInfo&)> callback);

  /// Names for overflow reports, e.g. `scaler.set_parameter_names(model->named_parameters())`.
  void set_parameter_names(const torch::OrderedDict<std::string, at::Tensor>& named_parameters);
  /// Calls `callback` with the report of every overflow found by unscale_ (needs
  /// GradScalerOptions::diagnose_overflow(true)).
  void on_overflow(std::function<void(const OverflowReport&)> callback);
  /// The report of the last overflow found by unscale_ while diagnose_overflow is on.
  const OverflowReport* last_overflow_report() const;

  /// PyTorch-compatible state: "scale" (double), "growth_factor" (double), "backoff_factor"
  /// (double), "growth_interval" (int), "_growth_tracker" (int), in this order; empty when
  /// disabled. Saved with mixprec::pickle_save_untagged (or in a mixprec::save_checkpoint) it
  /// loads in Python with plain torch.load as scaler.state_dict() does.
  /// When options beyond PyTorch are in use (GradScalerOptions::uses_extensions()), further keys
  /// follow: "mixprec_format" (int, 1) and the extended state (docs/options.md); Python's
  /// load_state_dict ignores them.
  c10::impl::GenericDict state_dict() const;
  /// Loads a state_dict() (also one saved from Python: mixprec's extra state then takes its
  /// defaults). Disabled: a no-op. Throws, leaving the scaler as it was, for an empty dict
  /// ("The source state dict is empty, ..."), a missing key, a value of the wrong type, a
  /// non-finite or non-positive scale, a negative tracker, options the constructor refuses
  /// (growth_factor <= 1, backoff_factor outside (0, 1), growth_interval < 1) or an unknown
  /// format (naming the key).
  void load_state_dict(const c10::impl::GenericDict& state_dict);

  /// The state_dict() entries, one archive key each, in a LibTorch archive: `torch::save(scaler,
  /// path)` and `torch::load(scaler, path)` work as for modules and optimizers (through the
  /// operator<< and operator>> below), C++ to C++ (Python's torch.load does not read LibTorch
  /// archives: use mixprec::save_checkpoint). load() checks as load_state_dict() does. The
  /// archive itself is read by LibTorch's own reader, which crashes on crafted files
  /// (docs/checkpoints.md): for files of unknown origin use mixprec::pickle_load and
  /// load_state_dict, or mixprec::load_checkpoint.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  // mixprec::load_checkpoint checks the model, optimizer and scaler before it changes any.
  friend void load_checkpoint(const std::string& path, torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer, GradScaler& scaler);
  // load_state_dict's checks; what it then changes is returned, to run when every other check
  // of a load has passed too.
  std::function<void()> plan_load_state_dict(const c10::impl::GenericDict& state_dict);

  struct PerOptimizerState {
    const void* optimizer = nullptr;  // nullptr: a list of unscale_grads_
    OptState stage = OptState::kReady;
    FoundInfPerDevice found_inf_per_device;
    bool reduced = true;  // false while the reducer has not gone through (it threw)
    bool recorded = false;  // found_inf recorded (by unscale_, or step()'s check on the fused path)
    // Set by clip_grad_norm_ for a SupportsAmpScaling optimizer: the coefficient its step
    // applies; grads_scaled: the grads are still scaled (the step unscales them too).
    at::Tensor clip_coef;
    bool grads_scaled = false;
  };

  // Note [Last steps are bounded and fingerprinted]
  // The outcome of each optimizer's last step() survives update() (an LR scheduler reads it
  // after). update() keeps only the optimizers stepped in the iteration it ends, so entries of
  // optimizers that are gone do not pile up and keep their found_inf tensors alive. An entry is
  // found by the optimizer's address *and* its parameters (their TensorImpls), so a new optimizer
  // that reuses a dead one's address over other parameters is not taken for it.
  struct LastStep {
    const void* optimizer = nullptr;
    std::vector<const void*> params;  // the fingerprint
    bool skipped_known = false;  // regular path: decided on the host
    bool skipped = false;
    at::Tensor found_inf;
  };
  const LastStep* find_last_step(const torch::optim::Optimizer& optimizer) const;

  std::pair<at::Tensor, at::Tensor> check_scale_growth_tracker(const char* funcname) const;
  at::Tensor inv_scale() const;
  void check_not_listed(const torch::optim::Optimizer& optimizer, const char* funcname) const;
  void record_unscaled(const torch::optim::Optimizer& optimizer);
  void record_last_step(const torch::optim::Optimizer& optimizer, bool skipped_known,
                        bool skipped, at::Tensor found_inf);
  void dispatch_events();
  void record_found_inf(torch::optim::Optimizer& optimizer, PerOptimizerState& state,
                        FoundInfPerDevice found);
  void reduce_found_inf(PerOptimizerState& state);
  void diagnose(torch::optim::Optimizer& optimizer, const FoundInfPerDevice& found);
  void lazy_init_scale_growth_tracker(c10::Device device);
  PerOptimizerState& state_for(const torch::optim::Optimizer& optimizer);
  const PerOptimizerState* find_state(const torch::optim::Optimizer& optimizer) const;
  at::Tensor step_fused(torch::optim::Optimizer& optimizer, PerOptimizerState& state);
  void record_grad_norm(const at::Tensor& norm);
  void reduce_norm_and_found(detail::GradNorm& norm, FoundInfPerDevice& found, double norm_type);

  GradScalerOptions options_;
  double init_scale_;
  std::int64_t init_growth_tracker_ = 0;
  at::Tensor scale_;           // 0-dim float32, created by the first scale()
  at::Tensor growth_tracker_;  // 0-dim int32, created with scale_
  std::vector<PerOptimizerState> per_optimizer_states_;  // in first-seen order
  // The TensorImpls of the gradients divided since the last update(): by unscale_()/step() and
  // by unscale_grads_() (Note [Gradient lists and optimizers] in src/torch/scaler/grad_scaler.cpp).
  std::vector<const void*> unscaled_grads_;
  std::vector<const void*> listed_grads_;

  // Beyond PyTorch. counters_: core::kNumCounters int64 on the scale's device (see
  // core::Counter); history_: history_size x 3 doubles. init_* hold loaded values until the
  // lazy init creates the tensors, as init_scale_ does.
  at::Tensor counters_;
  at::Tensor history_;
  std::vector<std::int64_t> init_counters_;
  std::vector<double> init_history_;
  std::vector<LastStep> last_steps_;
  FoundInfReducer found_inf_reducer_;
  std::vector<std::function<void(const ScaleEventInfo&)>> event_callbacks_;
  std::function<void(const OverflowReport&)> overflow_callback_;
  std::unordered_map<const void*, std::string> parameter_names_;
  bool has_overflow_report_ = false;
  OverflowReport last_overflow_report_;
  std::vector<at::Tensor> grad_norms_;  // clip_grad_norm_'s results, oldest first
  GradNormReducer grad_norm_reducer_;
};

/// One line with plain numbers, e.g.
/// `GradScaler(scale=65536, growth_factor=2, backoff_factor=0.5, growth_interval=2000, enabled=true)`.
/// Reads the scale (a device sync on CUDA).
std::ostream& operator<<(std::ostream& out, const GradScaler& scaler);

/// What torch::save(scaler, ...) and torch::load(scaler, ...) call (GradScaler::save / load).
torch::serialize::OutputArchive& operator<<(torch::serialize::OutputArchive& archive,
                                            const GradScaler& scaler);
torch::serialize::InputArchive& operator>>(torch::serialize::InputArchive& archive,
                                           GradScaler& scaler);

}  // namespace mixprec
