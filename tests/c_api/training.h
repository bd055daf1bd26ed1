// The training loop the C ABI tests drive on both sides: two small models with one optimizer each,
// overflows injected on chosen iterations, run once through the C API with the handles a binding
// passes, once through the C++ GradScaler on an identical copy, and compared bit for bit.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "c_api/c_api_test_util.h"
#include "mixprec/grad_scaler.h"

namespace mixprec::c_api_test {

constexpr int kIterations = 30;
// Iterations that end with update(new_scale) (C: update_to) and update(tensor) (update_to_tensor)
// instead of update(), and the scales they set.
constexpr int kUpdateToIteration = 20;
constexpr double kUpdateToScale = 300.0;
constexpr int kUpdateToTensorIteration = 25;
constexpr float kUpdateToTensorScale = 77.0f;

/// A small growth interval, so that the scale grows between the injected overflows.
inline ScalerConfig training_config() {
  ScalerConfig config;
  config.init_scale = 1024.0;
  config.growth_interval = 3;
  return config;
}

/// Two models trained together, each with its own optimizer: a (Linear-ReLU-Linear, 4-8-1) and
/// b (Linear, 4-1), as flat parameter lists (weight, bias, ...), float32 on the CPU.
struct Models {
  std::vector<torch::Tensor> a, b;
  std::vector<torch::Tensor>& part(int which) { return which == 0 ? a : b; }
};

inline Models make_models() {
  torch::manual_seed(0);
  auto param = [](std::vector<int64_t> shape) {
    return (torch::randn(shape) * 0.5).requires_grad_(true);
  };
  return Models{{param({8, 4}), param({8}), param({1, 8}), param({1})},
                {param({1, 4}), param({1})}};
}

/// Detached copies with the same values (the C++ side's models).
inline Models clone_models(const Models& m) {
  auto copy = [](const std::vector<torch::Tensor>& ps) {
    std::vector<torch::Tensor> out;
    for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
    return out;
  };
  return Models{copy(m.a), copy(m.b)};
}

struct Batch {
  torch::Tensor x, y;
};

inline std::vector<Batch> make_batches() {
  torch::manual_seed(1);
  std::vector<Batch> batches;
  for (int i = 0; i < kIterations; ++i) {
    torch::Tensor x = torch::randn({16, 4});
    batches.push_back({x, x.sum(1, /*keepdim=*/true).sin()});
  }
  return batches;
}

inline torch::Tensor loss_of(const Models& m, const Batch& batch) {
  const torch::Tensor hidden = torch::relu(torch::linear(batch.x, m.a[0], m.a[1]));
  return torch::mse_loss(torch::linear(hidden, m.a[2], m.a[3]), batch.y) +
         torch::mse_loss(torch::linear(batch.x, m.b[0], m.b[1]), batch.y);
}

/// Overflows after backward: inf in a's grads on iteration 3, in b's on 7, NaN in both on 11,
/// -inf in b's on 12 (a steps alone, b steps alone, both skip).
inline void inject_overflow(Models& m, int it) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  torch::NoGradGuard no_grad;
  if (it == 3) m.a[0].grad().mul_(inf);
  if (it == 7) m.b[0].grad().mul_(inf);
  if (it == 11) {
    m.a[2].grad().view(-1)[0].fill_(nan);
    m.b[1].grad().fill_(nan);
  }
  if (it == 12) m.b[0].grad().view(-1)[2].fill_(-inf);
}

/// The optimizers of the tests: LibTorch's own, and mixprec's fused ones (made through the C API
/// on the C side, as mixprec::optim on the C++ side), with the same hyperparameters.
enum class Kind { kTorchSgd, kTorchAdam, kFusedSgd, kFusedAdam, kFusedAdamW };

struct SgdArgs {
  double lr = 0.05, momentum = 0.9, dampening = 0.0, weight_decay = 1e-4;
  bool nesterov = true;
};
struct AdamArgs {
  double lr = 0.01, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 1e-3;
  bool amsgrad = false;
};
/// AdamW with amsgrad, so that both of Adam's variants are covered.
inline AdamArgs adamw_args() {
  AdamArgs a;
  a.weight_decay = 0.01;
  a.amsgrad = true;
  return a;
}

inline torch::optim::SGDOptions sgd_options(const SgdArgs& a) {
  return torch::optim::SGDOptions(a.lr)
      .momentum(a.momentum)
      .dampening(a.dampening)
      .weight_decay(a.weight_decay)
      .nesterov(a.nesterov);
}
template <typename Options>
Options adam_options(const AdamArgs& a) {
  return Options(a.lr)
      .betas({a.beta1, a.beta2})
      .eps(a.eps)
      .weight_decay(a.weight_decay)
      .amsgrad(a.amsgrad);
}

std::unique_ptr<torch::optim::Optimizer> make_cpp_optimizer(Kind kind,
                                                            std::vector<torch::Tensor> params);
/// The C side's optimizer over `params`: LibTorch's made by the binding and handed over in
/// `convention`; mixprec's made by mixprec_optim_*_create or _create_shared.
COptimizer make_c_optimizer(Kind kind, Convention convention, std::vector<torch::Tensor> params);

/// One training loop's scaler and two optimizers (0 over Models::a, 1 over Models::b): through
/// the C API (CSide) or the C++ GradScaler (CppSide).
class Side {
 public:
  explicit Side(Models models) : models(std::move(models)) {}
  virtual ~Side() = default;
  virtual torch::Tensor scale(const torch::Tensor& loss) = 0;
  virtual void unscale_(int which) = 0;
  /// Steps optimizer `which` through the scaler; whether it ran (C: out_stepped).
  virtual bool step(int which) = 0;
  virtual bool last_step_applied(int which) = 0;
  virtual torch::Tensor last_step_found_inf(int which) = 0;
  virtual void update() = 0;
  virtual void update_to(double new_scale) = 0;
  virtual void update_to_tensor(const torch::Tensor& new_scale) = 0;
  virtual double get_scale() = 0;
  virtual std::int64_t get_growth_tracker() = 0;
  virtual ScalerTelemetry telemetry() = 0;
  virtual torch::optim::Optimizer& optimizer(int which) = 0;

  Models models;
};

class CSide : public Side {
 public:
  CSide(Models models, const ScalerConfig& config, Kind kind_a, Kind kind_b, Convention conv);
  torch::Tensor scale(const torch::Tensor& loss) override;
  void unscale_(int which) override;
  bool step(int which) override;
  bool last_step_applied(int which) override;
  torch::Tensor last_step_found_inf(int which) override;
  void update() override;
  void update_to(double new_scale) override;
  void update_to_tensor(const torch::Tensor& new_scale) override;
  double get_scale() override;
  std::int64_t get_growth_tracker() override;
  ScalerTelemetry telemetry() override;
  torch::optim::Optimizer& optimizer(int which) override { return optimizers[which].get(); }

  std::vector<COptimizer> optimizers;
  CScaler scaler;
};

class CppSide : public Side {
 public:
  CppSide(Models models, const ScalerConfig& config, Kind kind_a, Kind kind_b);
  torch::Tensor scale(const torch::Tensor& loss) override { return scaler.scale(loss); }
  void unscale_(int which) override { scaler.unscale_(*optimizers[which]); }
  bool step(int which) override;
  bool last_step_applied(int which) override;
  torch::Tensor last_step_found_inf(int which) override;
  void update() override { scaler.update(); }
  void update_to(double new_scale) override { scaler.update(new_scale); }
  void update_to_tensor(const torch::Tensor& new_scale) override { scaler.update(new_scale); }
  double get_scale() override { return scaler.get_scale(); }
  std::int64_t get_growth_tracker() override { return scaler.get_growth_tracker(); }
  ScalerTelemetry telemetry() override { return scaler.telemetry(); }
  torch::optim::Optimizer& optimizer(int which) override { return *optimizers[which]; }

  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  GradScaler scaler;
};

/// What one iteration's steps reported, per optimizer.
struct StepReport {
  bool stepped = false;  ///< step()'s own answer (C: out_stepped)
  bool applied = false;  ///< last_step_applied afterwards
  torch::Tensor found_inf;
};
using IterationReport = std::array<StepReport, 2>;

/// Iteration `it` on `side`: zero_grad, forward, scaled backward, the injected overflow,
/// unscale_ of both optimizers if `unscale_first`, both steps, and the iteration's update.
IterationReport train_iteration(Side& side, const Batch& batch, int it, bool unscale_first);

/// Checks, bit for bit, that the C side matches the C++ side after iteration `it`: the steps'
/// outcomes, scale, growth tracker, telemetry and every parameter.
void expect_same_after_iteration(Side& c, Side& cpp, const IterationReport& c_report,
                                 const IterationReport& cpp_report);

}  // namespace mixprec::c_api_test
