// mixprec::GradScaler (include/mixprec/grad_scaler.h): PyTorch's torch/amp/grad_scaler.py
// behaviour on LibTorch. Kernels and the update rule live in the core; this file is the policy
// object: lazy state, the per-optimizer state machine, and checkpoints.
#include "mixprec/grad_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

#include "mixprec/amp_optimizer.h"
#include "mixprec/core/error.h"
#include "mixprec/core/loss_scaler.h"
#include "mixprec/functional.h"
#include "mixprec/torch_version.h"
#include "torch/views.h"

namespace mixprec {
namespace {

constexpr const char* kNoScaleHint =
    "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the "
    "iteration.";

// Note [found_inf is 0 or 1]
// PyTorch's fused optimizers skip only when found_inf == 1, but GradScaler hands them the *sum*
// over devices, so two devices that both overflowed (found_inf == 2) make the fused step run on
// inf gradients and subtract 2 from the step counter. mixprec combines found_inf with max, so the
// value is always 0 or 1, and SupportsAmpScaling optimizers treat any non-zero value as "skip".
// Nothing writes a recorded found_inf after the inf check (and its reducer), so one from the
// target device is shared as it is, without a copy.
at::Tensor combine_found_inf(const FoundInfPerDevice& found, const c10::Device& device) {
  if (found.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  if (found.size() == 1 && found.front().first == device) return found.front().second;
  at::Tensor combined = detail::to_device(found.front().second, device, /*copy=*/true);
  for (std::size_t i = 1; i < found.size(); ++i) {
    combined = at::maximum(combined, detail::to_device(found[i].second, device));
  }
  return combined;
}

}  // namespace

GradScaler::GradScaler() : GradScaler(GradScalerOptions()) {}

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)), init_scale_(options_.init_scale()) {
  if (!options_.enabled()) return;
  try {
    core::validate_scaler_options("GradScaler", options_.init_scale(), options_.policy());
  } catch (const core::Error& e) {
    TORCH_CHECK(false, e.what());
  }
  TORCH_CHECK(options_.history_size() >= 0, "GradScaler: history_size must be >= 0, got ",
              options_.history_size());
  TORCH_CHECK(options_.at_min_scale() != AtMinScale::kCallback || options_.on_min_scale(),
              "GradScaler: at_min_scale is kCallback but no on_min_scale callback was given");
  init_counters_.assign(core::kNumCounters, 0);
  core::init_counters(init_counters_.data(), options_.hysteresis());
  init_history_.assign(static_cast<std::size_t>(options_.history_size()) * 3, 0.0);
}

GradScaler::GradScaler(GradScaler&&) noexcept = default;
GradScaler& GradScaler::operator=(GradScaler&&) noexcept = default;
GradScaler::~GradScaler() = default;

std::pair<at::Tensor, at::Tensor> GradScaler::check_scale_growth_tracker(
    const char* funcname) const {
  TORCH_CHECK(scale_.defined(), "Attempted ", funcname, " but _scale is None.  ", kNoScaleHint);
  TORCH_CHECK(growth_tracker_.defined(), "Attempted ", funcname,
              " but _growth_tracker is None.  ", kNoScaleHint);
  return {scale_, growth_tracker_};
}

void GradScaler::lazy_init_scale_growth_tracker(c10::Device device) {
  TORCH_INTERNAL_ASSERT(!growth_tracker_.defined(), "_growth_tracker initialized before _scale");
  scale_ = at::full({}, init_scale_, at::TensorOptions().dtype(at::kFloat).device(device));
  growth_tracker_ = at::full({}, init_growth_tracker_,
                             at::TensorOptions().dtype(at::kInt).device(device));
  // Made on the device by fills whose values travel as kernel arguments, with no copy from host
  // memory, as PyTorch makes its state: a first scale() can then run inside CUDA graph capture,
  // and it never waits for the device.
  const auto on_device = at::TensorOptions().device(device);
  counters_ = at::zeros({core::kNumCounters}, on_device.dtype(at::kLong));
  for (std::int64_t i = 0; i < core::kNumCounters; ++i) {
    if (init_counters_[static_cast<std::size_t>(i)] != 0) {
      counters_[i].fill_(init_counters_[static_cast<std::size_t>(i)]);
    }
  }
  const bool history_empty = std::all_of(init_history_.begin(), init_history_.end(),
                                         [](double v) { return v == 0.0; });
  history_ = history_empty
                 ? at::zeros({options_.history_size(), 3}, on_device.dtype(at::kDouble))
                 // A history loaded from a checkpoint before the first scale(): one upload.
                 : detail::to_device(at::tensor(init_history_, at::kDouble)
                                         .reshape({options_.history_size(), 3}),
                                     device);
}

GradScaler::PerOptimizerState& GradScaler::state_for(const torch::optim::Optimizer& optimizer) {
  for (auto& s : per_optimizer_states_) {
    if (s.optimizer == &optimizer) return s;
  }
  PerOptimizerState fresh;
  fresh.optimizer = &optimizer;
  per_optimizer_states_.push_back(std::move(fresh));
  return per_optimizer_states_.back();
}

const GradScaler::PerOptimizerState* GradScaler::find_state(
    const torch::optim::Optimizer& optimizer) const {
  for (const auto& s : per_optimizer_states_) {
    if (s.optimizer == &optimizer) return &s;
  }
  return nullptr;
}

at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!options_.enabled()) return outputs;
  if (!scale_.defined()) lazy_init_scale_growth_tracker(outputs.device());
  return outputs * (outputs.device() == scale_.device()
                        ? scale_
                        : detail::to_device(scale_, outputs.device()));
}

std::vector<at::Tensor> GradScaler::scale(const std::vector<at::Tensor>& outputs) {
  if (!options_.enabled()) return outputs;
  std::vector<at::Tensor> scaled;
  scaled.reserve(outputs.size());
  std::vector<std::pair<c10::Device, at::Tensor>> per_device;  // one scale copy per device
  for (const at::Tensor& out : outputs) {
    if (!scale_.defined()) lazy_init_scale_growth_tracker(out.device());
    auto it = std::find_if(per_device.begin(), per_device.end(),
                           [&](const auto& p) { return p.first == out.device(); });
    if (it == per_device.end()) {
      it = per_device.insert(per_device.end(),
                             {out.device(), detail::to_device(scale_, out.device())});
    }
    scaled.push_back(out * it->second);
  }
  return scaled;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) return;
  check_scale_growth_tracker("unscale_");
  PerOptimizerState& state = state_for(optimizer);
  TORCH_CHECK(state.stage != OptState::kUnscaled,
              "unscale_() has already been called on this optimizer since the last update().");
  TORCH_CHECK(state.stage != OptState::kStepped, "unscale_() is being called after step().");
  check_not_listed(optimizer, "unscale_()");
  const at::Tensor found_inf = at::zeros({}, scale_.options());
  FoundInfPerDevice found = detail::unscale_grads_(optimizer, inv_scale(), found_inf,
                                                   /*allow_fp16=*/false, /*own_found_inf=*/true);
  record_unscaled(optimizer);
  // The grads are divided from here on, so the stage changes before the reducer runs: if the
  // collective throws (a timeout), a retry cannot divide them again, and step() and update()
  // run the reduction again before they decide.
  state.stage = OptState::kUnscaled;
  record_found_inf(optimizer, state, std::move(found));
}

// Note [Gradient lists and optimizers]
// unscale_grads_() divides gradients that an optimizer may also own, and unscale_()/step() know
// nothing of lists: unscaling the same gradient by both paths in one iteration would divide it
// twice, and update() would count both checks. So each path records the TensorImpls it divided
// (a push_back per gradient; the sets are only built when a list was unscaled), and each refuses
// a gradient the other (or itself) already divided since the last update().
namespace {
std::unordered_set<const void*> as_set(const std::vector<const void*>& impls) {
  return std::unordered_set<const void*>(impls.begin(), impls.end());
}
}  // namespace

void GradScaler::check_not_listed(const torch::optim::Optimizer& optimizer,
                                  const char* funcname) const {
  if (listed_grads_.empty()) return;
  const std::unordered_set<const void*> listed = as_set(listed_grads_);
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      TORCH_CHECK(!param.grad().defined() || listed.count(param.grad().unsafeGetTensorImpl()) == 0,
                  funcname, ": a gradient of this optimizer was already unscaled by "
                  "unscale_grads_() since the last update(); unscaling it again would divide it "
                  "twice.");
    }
  }
}

void GradScaler::record_unscaled(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      if (param.grad().defined()) unscaled_grads_.push_back(param.grad().unsafeGetTensorImpl());
    }
  }
}

at::Tensor GradScaler::unscale_grads_(const std::vector<at::Tensor>& grads) {
  if (!options_.enabled()) {
    auto first = std::find_if(grads.begin(), grads.end(),
                              [](const at::Tensor& g) { return g.defined(); });
    return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(
                             first == grads.end() ? c10::Device(c10::kCPU) : first->device()));
  }
  check_scale_growth_tracker("unscale_grads_");
  std::unordered_set<const void*> done = as_set(unscaled_grads_);
  done.insert(listed_grads_.begin(), listed_grads_.end());
  std::vector<at::Tensor> to_unscale;
  std::vector<const void*> impls;
  for (at::Tensor grad : grads) {  // a copy of the handle: a caller's grad is never replaced
    if (!grad.defined()) continue;
    TORCH_CHECK(done.insert(grad.unsafeGetTensorImpl()).second,
                "unscale_grads_(): a gradient was already unscaled since the last update() (by "
                "unscale_(), step() or unscale_grads_(), or twice in this list); unscaling it "
                "again would divide it twice.");
    impls.push_back(grad.unsafeGetTensorImpl());
    to_unscale.push_back(detail::grad_to_unscale(grad, /*allow_fp16=*/false));
  }
  const at::Tensor found_inf = at::zeros({}, scale_.options());
  PerOptimizerState state;  // optimizer nullptr: a list
  state.stage = OptState::kUnscaled;
  state.found_inf_per_device =
      detail::unscale_grad_list_(to_unscale, inv_scale(), found_inf, /*own_found_inf=*/true);
  // Recorded only once every kernel ran: a call that threw leaves no check behind for update().
  // No grads: a clean check, so that update() has one to count.
  if (state.found_inf_per_device.empty()) {
    state.found_inf_per_device.emplace_back(scale_.device(), found_inf);
  }
  state.recorded = true;
  state.reduced = false;
  listed_grads_.insert(listed_grads_.end(), impls.begin(), impls.end());
  per_optimizer_states_.push_back(std::move(state));
  reduce_found_inf(per_optimizer_states_.back());
  // A copy: what update() decides with is not the caller's to change.
  return combine_found_inf(per_optimizer_states_.back().found_inf_per_device, scale_.device())
      .clone();
}

// The reciprocal in double, rounded to float: exact for powers of two, as PyTorch's
// self._scale.double().reciprocal().float(). A CPU scale is read directly (one tensor instead
// of three ops: GradScaler's own cost per iteration, bench/optim_benchmark.cpp's BM_tiny_*).
at::Tensor GradScaler::inv_scale() const {
  return scale_.is_cpu()
             ? at::full({}, static_cast<float>(1.0 / static_cast<double>(*scale_.data_ptr<float>())),
                        scale_.options())
             : scale_.to(at::kDouble).reciprocal().to(at::kFloat);
}

void GradScaler::record_found_inf(torch::optim::Optimizer& optimizer, PerOptimizerState& state,
                                  FoundInfPerDevice found) {
  state.found_inf_per_device = std::move(found);
  state.recorded = true;
  state.reduced = false;
  reduce_found_inf(state);
  if (options_.diagnose_overflow()) diagnose(optimizer, state.found_inf_per_device);
}

// Runs the reducer over the recorded found_inf tensors; again after it threw, which is safe: MAX
// of values already reduced changes nothing.
void GradScaler::reduce_found_inf(PerOptimizerState& state) {
  if (found_inf_reducer_) {
    // A rank without grads still takes part in the collective, with a zero.
    FoundInfPerDevice& found = state.found_inf_per_device;
    if (found.empty()) found.emplace_back(scale_.device(), at::zeros({}, scale_.options()));
    for (auto& [device, f] : found) found_inf_reducer_(f);
  }
  state.reduced = true;
}

void GradScaler::set_found_inf_reducer(FoundInfReducer reducer) {
  found_inf_reducer_ = std::move(reducer);
}

at::Tensor GradScaler::step_fused(torch::optim::Optimizer& optimizer, PerOptimizerState& state) {
  auto& amp = dynamic_cast<SupportsAmpScaling&>(optimizer);
  if (state.stage == OptState::kReady) check_not_listed(optimizer, "step()");
  if (state.stage == OptState::kReady && !state.recorded) {
    // Record found_inf from the still-scaled grads; the optimizer unscales them itself. Once: a
    // step() retried after the reducer threw has already run the reduction again (step()), and
    // checking anew would make this rank join one more collective than its peers.
    const at::Tensor one = at::ones({}, scale_.options());
    const at::Tensor zero = at::zeros({}, scale_.options());
    record_found_inf(optimizer, state,
                     detail::unscale_grads_(optimizer, one, zero, /*allow_fp16=*/true,
                                            /*own_found_inf=*/true));
  }
  const at::Tensor found_inf = combine_found_inf(state.found_inf_per_device, scale_.device());
  record_last_step(optimizer, /*skipped_known=*/false, /*skipped=*/false, found_inf);
  const at::Tensor preset = amp.grad_scale;
  if (state.stage == OptState::kUnscaled && !state.grads_scaled) {
    amp.grad_scale = preset;  // grads are already unscaled; keep only a user's own scale
  } else {
    amp.grad_scale =
        preset.defined() ? scale_ * detail::to_device(preset, scale_.device()) : scale_;
  }
  amp.found_inf = found_inf;
  amp.clip_coef = state.clip_coef;  // clip_grad_norm_'s, applied in the same pass
  // The attributes do not outlive the step, also when step() throws (as PyTorch deletes them).
  struct ClearOnExit {
    SupportsAmpScaling& amp;
    ~ClearOnExit() {
      amp.grad_scale = at::Tensor();
      amp.found_inf = at::Tensor();
      amp.clip_coef = at::Tensor();
    }
  } clear{amp};
  at::Tensor result = optimizer.step();
  if (state.stage == OptState::kReady) record_unscaled(optimizer);  // the kernel unscaled them
  state.stage = OptState::kStepped;
  return result;
}

at::Tensor GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) return optimizer.step();
  check_scale_growth_tracker("step");
  TORCH_CHECK(state_for(optimizer).stage != OptState::kStepped,
              "step() has already been called since the last update().");
  // A reduction that threw after unscale_() is run again before anything is decided.
  if (!state_for(optimizer).reduced) reduce_found_inf(state_for(optimizer));
  if (dynamic_cast<SupportsAmpScaling*>(&optimizer) != nullptr) {
    return step_fused(optimizer, state_for(optimizer));
  }
  if (state_for(optimizer).stage == OptState::kReady) unscale_(optimizer);
  PerOptimizerState& state = state_for(optimizer);
  TORCH_CHECK(!state.found_inf_per_device.empty(),
              "No inf checks were recorded for this optimizer. This happens when none of its "
              "parameters has a .grad: did backward() reach them?");
  // One host read per device, stopping at the first overflow.
  bool found_inf = false;
  for (const auto& [device, found] : state.found_inf_per_device) {
    if ((found.is_cpu() ? *found.data_ptr<float>() : found.item<float>()) != 0.0f) {
      found_inf = true;
      break;
    }
  }
  record_last_step(optimizer, /*skipped_known=*/true, found_inf,
                   combine_found_inf(state.found_inf_per_device, scale_.device()));
  at::Tensor result = found_inf ? at::Tensor() : optimizer.step();
  state_for(optimizer).stage = OptState::kStepped;
  return result;
}

at::Tensor GradScaler::step(torch::optim::Optimizer& optimizer,
                             const torch::optim::Optimizer::LossClosure& closure) {
  if (!options_.enabled()) return optimizer.step(closure);
  TORCH_CHECK(closure == nullptr,
              "Closure use is not currently supported if GradScaler is enabled.");
  return step(optimizer);
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  check_scale_growth_tracker("update");
  FoundInfPerDevice all;
  for (auto& s : per_optimizer_states_) {
    if (!s.reduced) reduce_found_inf(s);
    all.insert(all.end(), s.found_inf_per_device.begin(), s.found_inf_per_device.end());
  }
  TORCH_CHECK(!all.empty(), "No inf checks were recorded prior to update.");
  const at::Tensor found_inf = all.size() == 1 && all.front().first == scale_.device()
                                   ? all.front().second
                                   : combine_found_inf(all, scale_.device());
  detail::update_scale_state_(scale_, growth_tracker_, found_inf, options_.policy(), &counters_,
                              &history_);
  // Note [Last steps are bounded and fingerprinted] (grad_scaler.h)
  last_steps_.erase(std::remove_if(last_steps_.begin(), last_steps_.end(),
                                   [&](const LastStep& s) {
                                     return std::none_of(
                                         per_optimizer_states_.begin(),
                                         per_optimizer_states_.end(),
                                         [&](const PerOptimizerState& p) {
                                           return p.optimizer == s.optimizer;
                                         });
                                   }),
                    last_steps_.end());
  per_optimizer_states_.clear();
  unscaled_grads_.clear();
  listed_grads_.clear();
  if (!event_callbacks_.empty() || options_.at_min_scale() != AtMinScale::kClamp) {
    dispatch_events();
  }
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled()) return;
  check_scale_growth_tracker("update");
  scale_.fill_(new_scale);
  per_optimizer_states_.clear();
  unscaled_grads_.clear();
  listed_grads_.clear();
}

void GradScaler::update(const at::Tensor& new_scale) {
  if (!options_.enabled()) return;
  check_scale_growth_tracker("update");
  // Python's text, of the PyTorch this LibTorch is (MIXPREC_TORCH_UPDATE_REASON_IN_ONE_LINE).
  constexpr const char* kReason =
#if MIXPREC_TORCH_UPDATE_REASON_IN_ONE_LINE
      "new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
      "torch.FloatTensor with requires_grad=False.";
#else
      "new_scale should be a float or a 1-element torch.cuda.FloatTensor or                     "
      "torch.FloatTensor with requires_grad=False.";
#endif
  TORCH_CHECK(new_scale.defined() && new_scale.device().type() == scale_.device().type(), kReason,
              " (it must be on the scale's device type, ", scale_.device().type(), ")");
  TORCH_CHECK(new_scale.numel() == 1, kReason, " (got ", new_scale.numel(), " elements)");
  TORCH_CHECK(!new_scale.requires_grad(), kReason, " (got requires_grad=True)");
  c10::NoGradGuard no_grad;
  scale_.copy_(new_scale.reshape({}));
  per_optimizer_states_.clear();
  unscaled_grads_.clear();
  listed_grads_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled()) return 1.0;
  if (!scale_.defined()) return init_scale_;
  return static_cast<double>(scale_.item<float>());
}

at::Tensor GradScaler::get_scale_async() const { return scale_; }

std::int64_t GradScaler::get_growth_tracker() const {
  if (!options_.enabled()) return 0;
  if (!growth_tracker_.defined()) return init_growth_tracker_;
  return growth_tracker_.item<std::int32_t>();
}

double GradScaler::get_growth_factor() const { return options_.growth_factor(); }
void GradScaler::set_growth_factor(double new_factor) { options_.growth_factor(new_factor); }
double GradScaler::get_backoff_factor() const { return options_.backoff_factor(); }
void GradScaler::set_backoff_factor(double new_factor) { options_.backoff_factor(new_factor); }
std::int64_t GradScaler::get_growth_interval() const { return options_.growth_interval(); }
void GradScaler::set_growth_interval(std::int64_t new_interval) {
  options_.growth_interval(new_interval);
}
bool GradScaler::is_enabled() const { return options_.enabled(); }

OptState GradScaler::stage(const torch::optim::Optimizer& optimizer) const {
  const PerOptimizerState* s = find_state(optimizer);
  return s == nullptr ? OptState::kReady : s->stage;
}

FoundInfPerDevice GradScaler::found_inf_per_device(const torch::optim::Optimizer& optimizer) const {
  const PerOptimizerState* s = find_state(optimizer);
  return s == nullptr ? FoundInfPerDevice{} : s->found_inf_per_device;
}

}  // namespace mixprec
