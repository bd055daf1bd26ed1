// GradScaler::clip_grad_norm_ (include/mixprec/grad_scaler.h): PyTorch's unscale_ + clip_grad_norm_
// with one read of the scaled grads for the inf check and the norm, then either the fused
// optimizer's own pass or one read-write pass (Note [Clipping inside the AMP step]).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "mixprec/amp_optimizer.h"
#include "mixprec/clip.h"
#include "mixprec/grad_scaler.h"
#include "torch/ops/clip_detail.h"
#include "torch/views.h"

namespace mixprec {

// Note [Clipping inside the AMP step]
// PyTorch's recipe, unscale_ + clip_grad_norm_ + a fused step, moves 48 bytes per fp32 AdamW
// parameter: unscale reads and writes the grad, the norm reads it, the clip reads and writes it,
// the step moves 28. Here one read gives both found_inf (on the stored bits, as unscale_) and the
// norm of u = fl(g * inv_scale), the value unscale_ would store (core::grad_norm_). The
// coefficient is then PyTorch's, from that norm. A SupportsAmpScaling optimizer receives the scale
// and the coefficient and computes fl(fl(g * inv) * coef) in its own pass, writing it back to
// the grad before its update reads it (Note [The fused clip is two multiplies]): 36 bytes in all.
// Any other optimizer gets its grads unscaled and clipped in one read-write pass now. Both give
// the grads PyTorch's two in-place passes give, for any scale, since each multiply rounds as
// theirs does. The state becomes kUnscaled either way, so PyTorch's errors (a second unscale_)
// still apply; for the fused optimizer the grads stay scaled until its step().

at::Tensor GradScaler::clip_grad_norm_(torch::optim::Optimizer& optimizer, double max_norm,
                                       double norm_type) {
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  if (!options_.enabled()) return mixprec::clip_grad_norm_(params, max_norm, norm_type);
  check_scale_growth_tracker("clip_grad_norm_");
  PerOptimizerState& state = state_for(optimizer);
  TORCH_CHECK(state.stage != OptState::kUnscaled,
              "unscale_() has already been called on this optimizer since the last update().");
  TORCH_CHECK(state.stage != OptState::kStepped, "unscale_() is being called after step().");
  check_not_listed(optimizer, "clip_grad_norm_()");
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    TORCH_CHECK(!p.grad().is_sparse(), "clip_grad_norm_: sparse gradients are not supported");
    TORCH_CHECK_VALUE(p.grad().scalar_type() != at::kHalf, "Attempting to unscale FP16 gradients.");
    grads.push_back(p.grad());
  }
  const bool fused = dynamic_cast<SupportsAmpScaling*>(&optimizer) != nullptr;

  if (!detail::fast_norm_type(norm_type)) {
    TORCH_CHECK(!grad_norm_reducer_ || (std::isfinite(norm_type) && norm_type > 0.0),
                "clip_grad_norm_: a grad norm reducer needs norm_type > 0, got ", norm_type);
    // Other p: unscale_ (which records found_inf), then the norm and the clip as PyTorch's.
    unscale_(optimizer);
    PerOptimizerState& unscaled = state_for(optimizer);
    detail::GradNorm local = detail::grad_norm(grads, norm_type, at::Tensor(), false);
    if (grad_norm_reducer_) {
      FoundInfPerDevice found = std::move(unscaled.found_inf_per_device);
      reduce_norm_and_found(local, found, norm_type);
      unscaled.found_inf_per_device = std::move(found);
      unscaled.reduced = true;
    }
    const at::Tensor coef = detail::clip_coefficient(max_norm, local.norm);
    if (fused) {
      unscaled.clip_coef = coef;  // the step multiplies by it in its own pass
    } else if (!grads.empty()) {
      detail::unscale_and_clip(grads, at::Tensor(), coef);
    }
    record_grad_norm(local.norm);
    return local.norm;
  }

  const at::Tensor inv = inv_scale();
  detail::GradNorm result = detail::grad_norm(grads, norm_type, inv, /*check_inf=*/true);
  const bool reduced = static_cast<bool>(grad_norm_reducer_);
  if (reduced) reduce_norm_and_found(result, result.found_inf, norm_type);
  const at::Tensor coef = detail::clip_coefficient(max_norm, result.norm);
  if (fused) {
    state.clip_coef = coef;
    state.grads_scaled = true;
  } else if (!grads.empty()) {
    detail::unscale_and_clip(grads, inv, coef);
  }
  record_unscaled(optimizer);
  // The norm reducer ran before anything changed (a throw leaves the optimizer kReady, to retry);
  // the found_inf reducer runs after the stage changed, as in unscale_.
  state.stage = OptState::kUnscaled;
  if (reduced) {
    state.found_inf_per_device = std::move(result.found_inf);
    state.recorded = true;
    state.reduced = true;  // the norm reducer was the found_inf reduction
    if (options_.diagnose_overflow()) diagnose(optimizer, state.found_inf_per_device);
  } else {
    record_found_inf(optimizer, state, std::move(result.found_inf));
  }
  record_grad_norm(result.norm);
  return result.norm;
}

// One collective for both: [power, found_inf] (Note [Clipping inside the AMP step]); after it
// `norm` is the global norm and `found` one global 0/1 on the scale's device.
void GradScaler::reduce_norm_and_found(detail::GradNorm& norm, FoundInfPerDevice& found,
                                       double norm_type) {
  const auto on_scale = scale_.options().dtype(at::kDouble);
  at::Tensor local_found = at::zeros({}, on_scale);
  for (const auto& [device, f] : found) {
    local_found = at::maximum(local_found, f.to(scale_.device(), at::kDouble));
  }
  at::Tensor pair = at::stack({norm.power.to(scale_.device(), at::kDouble), local_found});
  grad_norm_reducer_(pair, norm_type);
  norm.power = pair[0];
  norm.norm = detail::norm_from_power(norm.power, norm_type);
  found = {{scale_.device(), (pair[1] != 0).to(at::kFloat)}};
}

void GradScaler::set_grad_norm_reducer(GradNormReducer reducer) {
  grad_norm_reducer_ = std::move(reducer);
}

void GradScaler::record_grad_norm(const at::Tensor& norm) {
  grad_norms_.push_back(norm);
  const auto keep = static_cast<std::size_t>(std::max<std::int64_t>(1, options_.history_size()));
  if (grad_norms_.size() > keep) grad_norms_.erase(grad_norms_.begin());
}

std::vector<double> GradScaler::grad_norm_history() const {
  std::vector<double> out;
  out.reserve(grad_norms_.size());
  for (const at::Tensor& n : grad_norms_) out.push_back(static_cast<double>(n.item<float>()));
  return out;
}

}  // namespace mixprec
