// Gradient clipping on LibTorch tensors (include/mixprec/clip.h): Python's clip_grad_norm_ and its
// halves over the core's clip kernels (core/clip_kernels.h), grouped by device, with no host sync.
#include "mixprec/clip.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/core/clip_kernels.h"
#include "torch/ops/clip_detail.h"
#include "torch/views.h"

namespace mixprec {
namespace detail {
namespace {

constexpr const char* kWho = "clip_grad_norm_";

// The grads grouped by device, in first-seen order.
std::vector<std::pair<c10::Device, std::vector<at::Tensor>>> by_device(
    const std::vector<at::Tensor>& grads) {
  std::vector<std::pair<c10::Device, std::vector<at::Tensor>>> groups;
  for (const at::Tensor& g : grads) {
    if (!g.defined()) continue;
    TORCH_CHECK(!g.is_sparse(), kWho, ": sparse gradients are not supported");
    TORCH_CHECK(at::isFloatingType(g.scalar_type()), kWho,
                ": expected floating-point gradients, got ", g.scalar_type());
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& d) { return d.first == g.device(); });
    if (it == groups.end()) it = groups.insert(groups.end(), {g.device(), {}});
    it->second.push_back(g);
  }
  return groups;
}

// A dense tensor is read or written in place; any other goes through a contiguous copy.
at::Tensor dense(const at::Tensor& t) {
  return t.numel() == 0 || t.is_non_overlapping_and_dense() ? t : t.contiguous();
}

// Python's repr of a float, as its error message prints norm_type: 2.0, inf, 0.5.
std::string python_float(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

GradNorm slow_norm(const std::vector<std::pair<c10::Device, std::vector<at::Tensor>>>& groups,
                   double norm_type) {
  std::vector<at::Tensor> norms;
  const c10::Device first = groups.front().first;
  for (const auto& [device, grads] : groups) {
    for (const at::Tensor& g : grads) {
      norms.push_back(at::linalg_vector_norm(g.to(at::kDouble), norm_type).to(first));
    }
  }
  const at::Tensor total = at::linalg_vector_norm(at::stack(norms), norm_type);
  GradNorm out;
  out.norm = total.to(at::kFloat);
  const bool positive_p = std::isfinite(norm_type) && norm_type > 0.0;
  out.power = positive_p ? at::pow(total, norm_type) : total;
  return out;
}

}  // namespace

bool fast_norm_type(double norm_type) {
  return norm_type == 2.0 || (std::isinf(norm_type) && norm_type > 0);
}

GradNorm grad_norm(const std::vector<at::Tensor>& grads, double norm_type,
                   const at::Tensor& inv_scale, bool check_inf) {
  c10::NoGradGuard no_grad;
  const auto groups = by_device(grads);
  GradNorm out;
  if (groups.empty()) {
    out.norm = at::zeros({}, at::kFloat);  // Python: torch.tensor(0.)
    out.power = at::zeros({}, at::kDouble);
    return out;
  }
  if (!fast_norm_type(norm_type)) {
    TORCH_INTERNAL_ASSERT(!inv_scale.defined() && !check_inf,
                          "the slow norm path takes unscaled gradients");
    return slow_norm(groups, norm_type);
  }
  const core::NormKind kind = norm_type == 2.0 ? core::NormKind::kTwo : core::NormKind::kInf;
  const c10::Device first = groups.front().first;
  for (const auto& [device, device_grads] : groups) {
    std::vector<at::Tensor> kept;  // the dense copies, alive while the kernel reads them
    std::vector<core::TensorView> views;
    for (const at::Tensor& g : device_grads) {
      kept.push_back(dense(g));
      views.push_back(to_view(kept.back(), kWho));
    }
    const auto on = at::TensorOptions().device(device);
    at::Tensor power = at::zeros({}, on.dtype(at::kDouble));
    at::Tensor found = check_inf ? at::zeros({}, on.dtype(at::kFloat)) : at::Tensor();
    const at::Tensor inv = inv_scale.defined() ? to_device(inv_scale, device) : at::Tensor();
    on_device(device, [&](void* stream) {
      core::grad_norm_(views.data(), views.size(), kind,
                       inv.defined() ? inv.data_ptr<float>() : nullptr, power.data_ptr<double>(),
                       found.defined() ? found.data_ptr<float>() : nullptr, nullptr, stream);
    });
    if (check_inf) out.found_inf.emplace_back(device, found);
    power = to_device(power, first);
    if (!out.power.defined()) {
      out.power = power;
    } else {
      // at::maximum propagates NaN, as the kernels' max does.
      out.power = kind == core::NormKind::kTwo ? out.power + power : at::maximum(out.power, power);
    }
  }
  out.norm = norm_from_power(out.power, norm_type);
  return out;
}

at::Tensor norm_from_power(const at::Tensor& power, double norm_type) {
  if (norm_type == 2.0) return power.sqrt().to(at::kFloat);
  if (std::isinf(norm_type) || norm_type <= 0.0) return power.to(at::kFloat);
  return at::pow(power, 1.0 / norm_type).to(at::kFloat);
}

at::Tensor clip_coefficient(double max_norm, const at::Tensor& total_norm) {
  TORCH_CHECK(total_norm.defined() && total_norm.numel() == 1 &&
                  at::isFloatingType(total_norm.scalar_type()),
              "clip_grads_with_norm_: total_norm must be a 1-element floating-point tensor");
  c10::NoGradGuard no_grad;
  // Python: max_norm / (total_norm + 1e-6) is Tensor.__rtruediv__, reciprocal() then * max_norm,
  // then clamp(max=1.0), which keeps NaN. The same ATen ops round the same way.
  return at::clamp_max(at::reciprocal(total_norm.reshape({}).to(at::kFloat) + 1e-6) * max_norm,
                       1.0);
}

void unscale_and_clip(const std::vector<at::Tensor>& grads, const at::Tensor& inv_scale,
                      const at::Tensor& coef) {
  c10::NoGradGuard no_grad;
  for (const auto& [device, device_grads] : by_device(grads)) {
    std::vector<std::pair<at::Tensor, at::Tensor>> staged;  // (grad, its dense copy)
    std::vector<core::TensorView> views;
    for (const at::Tensor& g : device_grads) {
      at::Tensor d = dense(g);
      if (!d.is_same(g)) staged.emplace_back(g, d);
      views.push_back(to_view(d, kWho));
    }
    const at::Tensor c = to_device(coef, device);
    const at::Tensor inv = inv_scale.defined() ? to_device(inv_scale, device) : at::Tensor();
    on_device(device, [&](void* stream) {
      core::unscale_and_clip_(views.data(), views.size(),
                              inv.defined() ? inv.data_ptr<float>() : nullptr, c.data_ptr<float>(),
                              stream);
    });
    for (auto& [g, d] : staged) g.copy_(d);
    for (const at::Tensor& g : device_grads) bump_version(g);
  }
}

void throw_nonfinite_norm(double norm_type) {
  TORCH_CHECK(false, "The total norm of order ", python_float(norm_type),
              " for gradients from `parameters` is non-finite, so it cannot be clipped. To "
              "disable this error and scale the gradients by the non-finite norm anyway, set "
              "`error_if_nonfinite=False`");
  std::abort();  // unreachable
}

}  // namespace detail

namespace {

std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : parameters) {
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

}  // namespace

at::Tensor get_total_norm(const std::vector<at::Tensor>& tensors, double norm_type,
                          bool error_if_nonfinite) {
  at::Tensor norm = detail::grad_norm(tensors, norm_type, at::Tensor(), false).norm;
  if (error_if_nonfinite && !std::isfinite(norm.item<float>())) {  // the one sync
    detail::throw_nonfinite_norm(norm_type);
  }
  return norm;
}

void clip_grads_with_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                           const at::Tensor& total_norm) {
  const std::vector<at::Tensor> grads = grads_of(parameters);
  if (grads.empty()) return;
  detail::unscale_and_clip(grads, at::Tensor(), detail::clip_coefficient(max_norm, total_norm));
}

at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                           double norm_type, bool error_if_nonfinite) {
  const std::vector<at::Tensor> grads = grads_of(parameters);
  const at::Tensor norm = get_total_norm(grads, norm_type, error_if_nonfinite);
  if (!grads.empty()) {
    detail::unscale_and_clip(grads, at::Tensor(), detail::clip_coefficient(max_norm, norm));
  }
  return norm;
}

void clip_grad_value_(const std::vector<at::Tensor>& parameters, double clip_value) {
  c10::NoGradGuard no_grad;
  for (const at::Tensor& g : grads_of(parameters)) {
    at::Tensor grad = g;
    grad.clamp_min_(-clip_value);
    grad.clamp_max_(clip_value);
  }
}

}  // namespace mixprec
