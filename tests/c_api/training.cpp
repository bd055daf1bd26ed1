// The two sides of the C ABI tests' training loop (training.h): the C API driven through a
// binding's handles, and the C++ GradScaler it wraps.
#include "c_api/training.h"

#include <string>
#include <utility>

#include "mixprec/optim.h"

namespace mixprec::c_api_test {

std::unique_ptr<torch::optim::Optimizer> make_cpp_optimizer(Kind kind,
                                                            std::vector<torch::Tensor> params) {
  switch (kind) {
    case Kind::kTorchSgd:
      return std::make_unique<torch::optim::SGD>(std::move(params), sgd_options(SgdArgs{}));
    case Kind::kTorchAdam:
      return std::make_unique<torch::optim::Adam>(
          std::move(params), adam_options<torch::optim::AdamOptions>(AdamArgs{}));
    case Kind::kFusedSgd:
      return std::make_unique<optim::SGD>(std::move(params), sgd_options(SgdArgs{}));
    case Kind::kFusedAdam:
      return std::make_unique<optim::Adam>(std::move(params),
                                           adam_options<torch::optim::AdamOptions>(AdamArgs{}));
    case Kind::kFusedAdamW:
      return std::make_unique<optim::AdamW>(std::move(params),
                                            adam_options<torch::optim::AdamWOptions>(adamw_args()));
  }
  throw std::logic_error("make_cpp_optimizer: unknown kind");
}

COptimizer make_c_optimizer(Kind kind, Convention convention, std::vector<torch::Tensor> params) {
  if (kind == Kind::kTorchSgd || kind == Kind::kTorchAdam) {
    return COptimizer::adopt(make_cpp_optimizer(kind, std::move(params)), convention);
  }
  const bool shared = convention == Convention::kShared;
  const std::vector<void*> ps = handles(params);
  void* handle = nullptr;
  if (kind == Kind::kFusedSgd) {
    const SgdArgs a;
    MIXPREC_C_OK((shared ? mixprec_optim_sgd_create_shared : mixprec_optim_sgd_create)(
        ps.data(), ps.size(), a.lr, a.momentum, a.dampening, a.weight_decay, a.nesterov ? 1 : 0,
        &handle));
  } else {
    const AdamArgs a = kind == Kind::kFusedAdam ? AdamArgs{} : adamw_args();
    auto create = kind == Kind::kFusedAdam
                      ? (shared ? mixprec_optim_adam_create_shared : mixprec_optim_adam_create)
                      : (shared ? mixprec_optim_adamw_create_shared : mixprec_optim_adamw_create);
    MIXPREC_C_OK(create(ps.data(), ps.size(), a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                        a.amsgrad ? 1 : 0, &handle));
  }
  return COptimizer(handle, convention,
                    shared ? &mixprec_optimizer_free_shared : &mixprec_optimizer_free);
}

// ---- CSide: only handles cross the C API --------------------------------------------------------

CSide::CSide(Models m, const ScalerConfig& config, Kind kind_a, Kind kind_b, Convention conv)
    : Side(std::move(m)), scaler(nullptr, &mixprec_grad_scaler_destroy) {
  const mixprec_grad_scaler_options options = config.c();
  scaler = make_c_scaler(&options);
  optimizers.push_back(make_c_optimizer(kind_a, conv, models.a));
  optimizers.push_back(make_c_optimizer(kind_b, conv, models.b));
}

torch::Tensor CSide::scale(const torch::Tensor& loss) {
  torch::Tensor handle = loss;  // the binding's own tensor object, passed by address
  OwnedTensor scaled;
  MIXPREC_C_OK(mixprec_grad_scaler_scale(scaler.get(), &handle, scaled.out()));
  return scaled.get();  // a new reference; the handle itself is freed here
}

void CSide::unscale_(int which) { MIXPREC_C_OK(optimizers[which].unscale_(scaler.get())); }

bool CSide::step(int which) {
  int stepped = -1;
  MIXPREC_C_OK(optimizers[which].step(scaler.get(), &stepped));
  EXPECT_TRUE(stepped == 0 || stepped == 1) << "out_stepped " << stepped;
  return stepped == 1;
}

bool CSide::last_step_applied(int which) {
  int applied = -1;
  MIXPREC_C_OK(optimizers[which].last_step_applied(scaler.get(), &applied));
  EXPECT_TRUE(applied == 0 || applied == 1) << "last_step_applied " << applied;
  return applied == 1;
}

torch::Tensor CSide::last_step_found_inf(int which) {
  OwnedTensor found;
  MIXPREC_C_OK(optimizers[which].last_step_found_inf(scaler.get(), found.out()));
  return found.get();
}

void CSide::update() { MIXPREC_C_OK(mixprec_grad_scaler_update(scaler.get())); }

void CSide::update_to(double new_scale) {
  MIXPREC_C_OK(mixprec_grad_scaler_update_to(scaler.get(), new_scale));
}

void CSide::update_to_tensor(const torch::Tensor& new_scale) {
  torch::Tensor handle = new_scale;
  MIXPREC_C_OK(mixprec_grad_scaler_update_to_tensor(scaler.get(), &handle));
}

double CSide::get_scale() {
  double scale = 0.0;
  MIXPREC_C_OK(mixprec_grad_scaler_get_scale(scaler.get(), &scale));
  return scale;
}

std::int64_t CSide::get_growth_tracker() {
  std::int64_t tracker = -1;
  MIXPREC_C_OK(mixprec_grad_scaler_get_growth_tracker(scaler.get(), &tracker));
  return tracker;
}

ScalerTelemetry CSide::telemetry() { return c_telemetry(scaler.get()); }

// ---- CppSide: the reference ---------------------------------------------------------------------

CppSide::CppSide(Models m, const ScalerConfig& config, Kind kind_a, Kind kind_b)
    : Side(std::move(m)), scaler(config.cpp()) {
  optimizers.push_back(make_cpp_optimizer(kind_a, models.a));
  optimizers.push_back(make_cpp_optimizer(kind_b, models.b));
}

bool CppSide::step(int which) {
  scaler.step(*optimizers[which]);
  return scaler.last_step_applied(*optimizers[which]);
}

bool CppSide::last_step_applied(int which) { return scaler.last_step_applied(*optimizers[which]); }

torch::Tensor CppSide::last_step_found_inf(int which) {
  return scaler.last_step_found_inf(*optimizers[which]);
}

// ---- the loop -----------------------------------------------------------------------------------

IterationReport train_iteration(Side& side, const Batch& batch, int it, bool unscale_first) {
  for (int which = 0; which < 2; ++which) side.optimizer(which).zero_grad();
  side.scale(loss_of(side.models, batch)).backward();
  inject_overflow(side.models, it);
  if (unscale_first) {
    for (int which = 0; which < 2; ++which) side.unscale_(which);
  }
  IterationReport report;
  for (int which = 0; which < 2; ++which) report[which].stepped = side.step(which);
  for (int which = 0; which < 2; ++which) {
    report[which].applied = side.last_step_applied(which);
    report[which].found_inf = side.last_step_found_inf(which);
  }
  if (it == kUpdateToIteration) {
    side.update_to(kUpdateToScale);
  } else if (it == kUpdateToTensorIteration) {
    side.update_to_tensor(torch::full({1}, kUpdateToTensorScale));
  } else {
    side.update();
  }
  return report;
}

void expect_same_after_iteration(Side& c, Side& cpp, const IterationReport& c_report,
                                 const IterationReport& cpp_report) {
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE("optimizer " + std::to_string(which));
    EXPECT_EQ(c_report[which].stepped, cpp_report[which].stepped);
    EXPECT_EQ(c_report[which].applied, cpp_report[which].applied);
    EXPECT_EQ(c_report[which].stepped, c_report[which].applied);
    EXPECT_TRUE(bitwise_equal(c_report[which].found_inf, cpp_report[which].found_inf))
        << "C found_inf " << c_report[which].found_inf << "\nC++ found_inf "
        << cpp_report[which].found_inf;
    // Read after update(): the outcome survives the update that ends its iteration.
    EXPECT_EQ(c.last_step_applied(which), cpp.last_step_applied(which));
  }
  EXPECT_EQ(c.get_scale(), cpp.get_scale());
  EXPECT_EQ(c.get_growth_tracker(), cpp.get_growth_tracker());
  expect_same_telemetry(c.telemetry(), cpp.telemetry());
  for (int which = 0; which < 2; ++which) {
    const auto& cs = c.models.part(which);
    const auto& rs = cpp.models.part(which);
    for (size_t i = 0; i < cs.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(cs[i], rs[i])) << "parameter " << i << " of model " << which;
    }
  }
}

}  // namespace mixprec::c_api_test
