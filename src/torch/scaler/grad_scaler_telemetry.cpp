// What GradScaler reports beyond PyTorch: step outcome, telemetry counters and history, update
// events (and the at-min-scale policy they drive), and opt-in overflow diagnostics.
#include <ATen/ATen.h>

#include <string>

#include "mixprec/core/diagnostics.h"
#include "mixprec/core/scale_policy.h"
#include "mixprec/grad_scaler.h"
#include "torch/views.h"

namespace mixprec {

namespace {

// The parameters' TensorImpls, in order: Note [Last steps are bounded and fingerprinted].
std::vector<const void*> fingerprint(const torch::optim::Optimizer& optimizer) {
  std::vector<const void*> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) params.push_back(p.unsafeGetTensorImpl());
  }
  return params;
}

}  // namespace

void GradScaler::record_last_step(const torch::optim::Optimizer& optimizer, bool skipped_known,
                                  bool skipped, at::Tensor found_inf) {
  LastStep step{&optimizer, fingerprint(optimizer), skipped_known, skipped, std::move(found_inf)};
  for (auto& s : last_steps_) {
    if (s.optimizer == &optimizer) {
      s = std::move(step);
      return;
    }
  }
  last_steps_.push_back(std::move(step));
}

const GradScaler::LastStep* GradScaler::find_last_step(
    const torch::optim::Optimizer& optimizer) const {
  for (const auto& s : last_steps_) {
    if (s.optimizer == &optimizer) return s.params == fingerprint(optimizer) ? &s : nullptr;
  }
  return nullptr;
}

bool GradScaler::last_step_applied(const torch::optim::Optimizer& optimizer) const {
  if (const LastStep* s = find_last_step(optimizer)) {
    if (s->skipped_known) return !s->skipped;
    return s->found_inf.item<float>() == 0.0f;  // fused path: decided on the device
  }
  return !options_.enabled();  // a disabled scaler never skips
}

at::Tensor GradScaler::last_step_found_inf(const torch::optim::Optimizer& optimizer) const {
  const LastStep* s = find_last_step(optimizer);
  return s == nullptr ? at::Tensor() : s->found_inf;
}

ScalerTelemetry GradScaler::telemetry() const {
  ScalerTelemetry t;
  if (!options_.enabled()) return t;
  const std::vector<std::int64_t> c =
      counters_.defined() ? detail::to_host_vector<std::int64_t>(counters_)
                          : init_counters_;
  t.iterations = c[core::kCounterIterations];
  t.skipped_steps = c[core::kCounterSkippedSteps];
  t.growths = c[core::kCounterGrowths];
  t.backoffs = c[core::kCounterBackoffs];
  t.consecutive_overflows = c[core::kCounterConsecutiveOverflows];
  t.last_overflow_iteration = c[core::kCounterLastOverflowIteration];
  t.hysteresis_tracker = c[core::kCounterHysteresis];
  return t;
}

std::vector<ScaleHistoryEntry> GradScaler::history() const {
  std::vector<ScaleHistoryEntry> rows;
  if (!options_.enabled() || options_.history_size() == 0) return rows;
  const std::int64_t capacity = options_.history_size();
  const std::int64_t iterations = telemetry().iterations;
  const std::vector<double> h =
      history_.defined() ? detail::to_host_vector<double>(history_) : init_history_;
  const std::int64_t first = iterations > capacity ? iterations - capacity : 0;
  for (std::int64_t it = first; it < iterations; ++it) {
    const double* row = h.data() + 3 * (it % capacity);
    rows.push_back({static_cast<std::int64_t>(row[0]), row[1], row[2] != 0.0});
  }
  return rows;
}

void GradScaler::on_event(std::function<void(const ScaleEventInfo&)> callback) {
  TORCH_CHECK(callback, "GradScaler::on_event: the callback is empty");
  event_callbacks_.push_back(std::move(callback));
}

void GradScaler::dispatch_events() {
  const std::vector<std::int64_t> c = detail::to_host_vector<std::int64_t>(counters_);
  ScaleEventInfo info;
  info.events = static_cast<std::uint32_t>(c[core::kCounterLastEvents]);
  info.iteration = c[core::kCounterIterations] - 1;
  info.scale = get_scale();
  for (const auto& callback : event_callbacks_) callback(info);
  if ((info.events & core::kEventOverflowAtMin) == 0) return;
  if (options_.at_min_scale() == AtMinScale::kCallback) {
    options_.on_min_scale()(info.scale);
  } else if (options_.at_min_scale() == AtMinScale::kThrow) {
    TORCH_CHECK(false, "GradScaler: the gradients overflowed while the loss scale was already at ",
                "min_scale (", options_.min_scale(), "), ", c[core::kCounterConsecutiveOverflows],
                " overflows in a row at iteration ", info.iteration,
                ". Scaling cannot help any more: the model produces inf/NaN by itself. Try bf16 "
                "(especially if the model was pretrained in bf16), a lower learning rate, "
                "gradient clipping, or check the data for NaN. Use at_min_scale(kClamp) to go on.");
  }
}

void GradScaler::set_parameter_names(
    const torch::OrderedDict<std::string, at::Tensor>& named_parameters) {
  parameter_names_.clear();
  for (const auto& item : named_parameters) {
    parameter_names_[item.value().unsafeGetTensorImpl()] = item.key();
  }
}

void GradScaler::on_overflow(std::function<void(const OverflowReport&)> callback) {
  overflow_callback_ = std::move(callback);
}

const OverflowReport* GradScaler::last_overflow_report() const {
  return has_overflow_report_ ? &last_overflow_report_ : nullptr;
}

void GradScaler::diagnose(torch::optim::Optimizer& optimizer, const FoundInfPerDevice& found) {
  bool overflow = false;
  for (const auto& [device, f] : found) overflow |= f.item<float>() != 0.0f;  // opt-in sync
  if (!overflow) return;
  OverflowReport report;
  report.iteration = telemetry().iterations;
  std::int64_t index = 0;
  const auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (std::size_t i = 0; i < params.size(); ++i, ++index) {
      const at::Tensor& grad = params[i].grad();
      if (!grad.defined()) continue;
      const at::Tensor values = (grad.is_sparse() ? grad._values() : grad).cpu().contiguous();
      const core::NonFiniteCount count = core::count_nonfinite(detail::to_view(values, "diagnose"));
      if (count.first_index < 0) continue;
      auto name = parameter_names_.find(params[i].unsafeGetTensorImpl());
      report.parameters.push_back(
          {name != parameter_names_.end() ? name->second
                                          : "group" + std::to_string(g) + ".param" + std::to_string(i),
           index, count.inf_count, count.nan_count, count.first_index, count.first_value});
    }
  }
  last_overflow_report_ = std::move(report);
  has_overflow_report_ = true;
  if (overflow_callback_) overflow_callback_(last_overflow_report_);
}

}  // namespace mixprec
