// Shared harness of the PyTorch GradScaler test ports: _create_scaling_models_optimizers,
// _create_scaling_case and _run_scaling_case (spec/pytorch-gradscaler.md §6.0), in C++.
// A control run (no scaling API) and a scaling run must end with the same params/grads/state.
#pragma once

#include <gtest/gtest.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "torch/test_util.h"

namespace mixprec_test {

/// PyTorch's helper sets no seed; we do, so every port is deterministic.
constexpr std::uint64_t kScalingCaseSeed = 20;

/// Builds an optimizer over `params` (PyTorch's optimizer_ctor + optimizer_kwargs).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

/// The helpers' default: SGD with lr = 1.0.
inline OptimizerFactory sgd_factory(torch::optim::SGDOptions options = torch::optim::SGDOptions(1.0)) {
  return [options](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(std::move(params), options);
  };
}
/// Adam; the helpers start from lr = 1.0 (overlaid by the caller's options).
inline OptimizerFactory adam_factory(torch::optim::AdamOptions options = torch::optim::AdamOptions(1.0)) {
  return [options](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::Adam>(std::move(params), options);
  };
}
inline OptimizerFactory adamw_factory(torch::optim::AdamWOptions options = torch::optim::AdamWOptions(1.0)) {
  return [options](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::AdamW>(std::move(params), options);
  };
}

/// (control model, scaling model, control optimizer, scaling optimizer).
struct ScalingModels {
  torch::nn::Sequential mod_control{nullptr};
  torch::nn::Sequential mod_scaling{nullptr};
  std::unique_ptr<torch::optim::Optimizer> opt_control;
  std::unique_ptr<torch::optim::Optimizer> opt_scaling;
};

using ScalingData = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

/// The 7-tuple of _create_scaling_case.
struct ScalingCase : ScalingModels {
  ScalingData data;
  torch::nn::MSELoss loss_fn{nullptr};
  int skip_iter = 2;
};

/// _create_scaling_models_optimizers: two Sequential(Linear(8,8), Linear(8,8)) with identical
/// weights, one optimizer each.
inline ScalingModels create_scaling_models_optimizers(
    const OptimizerFactory& optimizer_ctor = sgd_factory()) {
  ScalingModels m;
  m.mod_control = torch::nn::Sequential(torch::nn::Linear(8, 8), torch::nn::Linear(8, 8));
  m.mod_scaling = torch::nn::Sequential(torch::nn::Linear(8, 8), torch::nn::Linear(8, 8));
  {
    torch::NoGradGuard no_grad;
    auto c = m.mod_control->parameters();
    auto s = m.mod_scaling->parameters();
    for (size_t i = 0; i < c.size(); ++i) s[i].copy_(c[i]);
  }
  m.opt_control = optimizer_ctor(m.mod_control->parameters());
  m.opt_scaling = optimizer_ctor(m.mod_scaling->parameters());
  return m;
}

/// _create_scaling_case: models/optimizers, 4 pairs of 8x8 randn (input, target), MSELoss,
/// skip_iter = 2. Seeds the generator first (PyTorch does not).
inline ScalingCase create_scaling_case(const OptimizerFactory& optimizer_ctor = sgd_factory(),
                                       torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(kScalingCaseSeed);
  ScalingCase c;
  static_cast<ScalingModels&>(c) = create_scaling_models_optimizers(optimizer_ctor);
  for (int i = 0; i < 4; ++i) {
    auto input = torch::randn({8, 8}, torch::dtype(dtype));
    auto target = torch::randn({8, 8}, torch::dtype(dtype));
    c.data.emplace_back(input, target);
  }
  c.loss_fn = torch::nn::MSELoss();
  c.skip_iter = 2;
  return c;
}

/// The gradient of the second layer's weight (`model[1].weight.grad`), where runs inject inf.
inline torch::Tensor second_layer_weight_grad(torch::nn::Sequential& model) {
  return model->at<torch::nn::LinearImpl>(1).weight.grad();
}
/// `model[1].weight.grad.data.fill_(inf)`.
inline void inject_inf(torch::nn::Sequential& model) {
  torch::NoGradGuard no_grad;
  second_layer_weight_grad(model).fill_(std::numeric_limits<double>::infinity());
}

/// PyTorch's assertEqual(a, b, atol, rtol): |a - b| <= atol + rtol * |b|, NaNs equal.
inline ::testing::AssertionResult tensors_close(const torch::Tensor& a, const torch::Tensor& b,
                                                double atol, double rtol = 1e-5) {
  if (a.defined() != b.defined()) {
    return ::testing::AssertionFailure() << "one tensor is undefined, the other is not";
  }
  if (!a.defined()) return ::testing::AssertionSuccess();
  if (a.sizes() != b.sizes()) {
    return ::testing::AssertionFailure() << "sizes differ: " << a.sizes() << " vs " << b.sizes();
  }
  auto ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
  if (torch::allclose(ad, bd, rtol, atol, /*equal_nan=*/true)) return ::testing::AssertionSuccess();
  auto diff = (ad - bd).abs().nan_to_num(0.0);
  return ::testing::AssertionFailure()
         << "max |a - b| = " << diff.max().item<double>() << " (atol " << atol << ", rtol "
         << rtol << ")";
}

/// Every state entry of `control` for parameter `c` is close to the matching entry of
/// `scaling` for parameter `s` (SGD momentum buffers, Adam/AdamW step and moments).
inline void expect_optimizer_state_close(const torch::optim::Optimizer& control,
                                         const torch::Tensor& c,
                                         const torch::optim::Optimizer& scaling,
                                         const torch::Tensor& s, double atol, double rtol,
                                         const std::string& where) {
  const auto* sc = find_state(control, c);
  const auto* ss = find_state(scaling, s);
  if (sc == nullptr) return;  // no state for this param (e.g. plain SGD)
  ASSERT_NE(ss, nullptr) << where << ": scaling optimizer has no state";
  using torch::optim::AdamParamState;
  using torch::optim::AdamWParamState;
  using torch::optim::SGDParamState;
  if (auto* a = dynamic_cast<const SGDParamState*>(sc)) {
    auto* b = dynamic_cast<const SGDParamState*>(ss);
    ASSERT_NE(b, nullptr) << where;
    EXPECT_TRUE(tensors_close(b->momentum_buffer(), a->momentum_buffer(), atol, rtol))
        << where << " momentum_buffer";
  } else if (auto* a = dynamic_cast<const AdamParamState*>(sc)) {
    auto* b = dynamic_cast<const AdamParamState*>(ss);
    ASSERT_NE(b, nullptr) << where;
    EXPECT_EQ(b->step(), a->step()) << where << " step";
    EXPECT_TRUE(tensors_close(b->exp_avg(), a->exp_avg(), atol, rtol)) << where << " exp_avg";
    EXPECT_TRUE(tensors_close(b->exp_avg_sq(), a->exp_avg_sq(), atol, rtol))
        << where << " exp_avg_sq";
    EXPECT_TRUE(tensors_close(b->max_exp_avg_sq(), a->max_exp_avg_sq(), atol, rtol))
        << where << " max_exp_avg_sq";
  } else if (auto* a = dynamic_cast<const AdamWParamState*>(sc)) {
    auto* b = dynamic_cast<const AdamWParamState*>(ss);
    ASSERT_NE(b, nullptr) << where;
    EXPECT_EQ(b->step(), a->step()) << where << " step";
    EXPECT_TRUE(tensors_close(b->exp_avg(), a->exp_avg(), atol, rtol)) << where << " exp_avg";
    EXPECT_TRUE(tensors_close(b->exp_avg_sq(), a->exp_avg_sq(), atol, rtol))
        << where << " exp_avg_sq";
    EXPECT_TRUE(tensors_close(b->max_exp_avg_sq(), a->max_exp_avg_sq(), atol, rtol))
        << where << " max_exp_avg_sq";
  } else {
    ADD_FAILURE() << where << ": optimizer state of an unknown type; extend the harness";
  }
}

/// A `run` function of _run_scaling_case. `scaler` may be replaced in place (PyTorch's run
/// returns a possibly unpickled scaler that then replaces the old one).
using ScalingRun =
    std::function<void(const ScalingData& data, torch::nn::Sequential& model,
                       torch::optim::Optimizer& optimizer, mixprec::GradScaler& scaler,
                       torch::nn::MSELoss& loss_fn, int skip_iter, bool try_scaling_api)>;

/// _run_scaling_case: for enabled = true, false: a fresh case, a scaler (init 128, growth 2,
/// interval 1), the control run then the scaling run; the final scale must be exactly
/// 128 * 2^unskipped * 0.5^skipped (1.0 when disabled), and params, grads and optimizer state
/// of both models must agree within atol and rtol = 1e-5.
inline void run_scaling_case(const ScalingRun& run, int unskipped, int skipped,
                             double atol = 1e-7,
                             const OptimizerFactory& optimizer_ctor = sgd_factory()) {
  constexpr double kRtol = 1e-5;
  for (bool enabled : {true, false}) {
    SCOPED_TRACE(enabled ? "enabled=true" : "enabled=false");
    ScalingCase c = create_scaling_case(optimizer_ctor);
    mixprec::GradScaler scaler(mixprec::GradScalerOptions()
                                   .init_scale(128.0)
                                   .growth_factor(2.0)
                                   .enabled(enabled)
                                   .growth_interval(1));
    run(c.data, c.mod_control, *c.opt_control, scaler, c.loss_fn, c.skip_iter, false);
    run(c.data, c.mod_scaling, *c.opt_scaling, scaler, c.loss_fn, c.skip_iter, true);

    if (enabled) {
      // Expected from the constructor's numbers, not read back from the code under test.
      const double growth = unskipped > 0 ? std::pow(2.0, unskipped) : 1.0;
      const double backoff = skipped > 0 ? std::pow(0.5, skipped) : 1.0;
      EXPECT_EQ(scaler.get_scale(), 128.0 * growth * backoff);
    } else {
      EXPECT_EQ(scaler.get_scale(), 1.0);
    }

    auto pc = c.mod_control->parameters();
    auto ps = c.mod_scaling->parameters();
    ASSERT_EQ(pc.size(), ps.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      const std::string where = "param " + std::to_string(i);
      EXPECT_TRUE(tensors_close(ps[i].grad(), pc[i].grad(), atol, kRtol)) << where << " grad";
      expect_optimizer_state_close(*c.opt_control, pc[i], *c.opt_scaling, ps[i], atol, kRtol,
                                   where);
      EXPECT_TRUE(tensors_close(ps[i], pc[i], atol, kRtol)) << where << " value";
    }
  }
}

/// The scaler's state_dict through torch::pickle_save / torch::pickle_load into a new scaler
/// (PyTorch pickles the scaler itself; the state dict is what C++ can round-trip).
inline mixprec::GradScaler pickle_round_trip(const mixprec::GradScaler& scaler) {
  std::vector<char> bytes = torch::pickle_save(c10::IValue(scaler.state_dict()));
  c10::IValue loaded = torch::pickle_load(bytes);
  mixprec::GradScaler restored(mixprec::GradScalerOptions().enabled(scaler.is_enabled()));
  restored.load_state_dict(loaded.toGenericDict());
  return restored;
}

/// The found_inf copy recorded for `device`; an undefined tensor if there is none.
inline torch::Tensor found_inf_on(const std::vector<std::pair<c10::Device, torch::Tensor>>& fipd,
                                  c10::Device device) {
  for (const auto& entry : fipd) {
    if (entry.first == device) return entry.second;
  }
  return {};
}

}  // namespace mixprec_test
