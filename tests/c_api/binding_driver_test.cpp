// The C ABI driven as a binding drives it (tch-rs, TorchSharp): tensors and optimizers made with
// LibTorch, only handles passed to the C calls, every returned tensor freed by the test. Each
// loop runs beside the C++ GradScaler on identical models and is compared bit for bit after
// every iteration (training.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "c_api/c_api_test_util.h"
#include "c_api/training.h"
#include "mixprec/clip.h"
#include "mixprec/grad_scaler.h"

namespace mixprec::c_api_test {
namespace {

/// A side-by-side run: the optimizers of models a and b, their convention on the C side, and
/// whether unscale_ runs explicitly before step.
struct Scenario {
  const char* name;
  Kind kind_a;
  Kind kind_b;
  Convention convention;
  bool unscale_first;
};

/// How GoogleTest names a Scenario parameter (also in CTest's test names).
void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

/// What the C++ reference did over the run, to check the scenario reached what it is meant to.
struct RunSummary {
  ScalerTelemetry telemetry;
  int skipped[2] = {0, 0};  ///< steps skipped per optimizer
};

RunSummary run_side_by_side(const Scenario& s, const ScalerConfig& config) {
  const Models models = make_models();
  CSide c(clone_models(models), config, s.kind_a, s.kind_b, s.convention);
  CppSide cpp(clone_models(models), config, s.kind_a, s.kind_b);
  const std::vector<Batch> batches = make_batches();
  RunSummary summary;
  for (int it = 0; it < kIterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    const IterationReport c_report = train_iteration(c, batches[it], it, s.unscale_first);
    const IterationReport cpp_report = train_iteration(cpp, batches[it], it, s.unscale_first);
    expect_same_after_iteration(c, cpp, c_report, cpp_report);
    for (int which = 0; which < 2; ++which) summary.skipped[which] += !cpp_report[which].applied;
    if (::testing::Test::HasFailure()) break;  // one iteration's differences are enough to read
  }
  summary.telemetry = cpp.telemetry();
  return summary;
}

class BindingDriverTest : public ::testing::TestWithParam<Scenario> {};

// The scaler steps both optimizers (LibTorch's, mixprec's fused ones made through the C API, or
// one of each) in either convention, with or without an explicit unscale_; scale, outcomes,
// telemetry and parameters follow the C++ GradScaler's bit for bit.
TEST_P(BindingDriverTest, TrainsLikeTheCppGradScaler) {
  const RunSummary summary = run_side_by_side(GetParam(), training_config());
  // The loop went through what it is meant to: per-optimizer skips (a alone on iteration 3, b
  // alone on 7, both on 11), backoffs and growths.
  EXPECT_GE(summary.skipped[0], 2);
  EXPECT_GE(summary.skipped[1], 3);
  EXPECT_GE(summary.telemetry.backoffs, 4);
  EXPECT_GE(summary.telemetry.growths, 2);
}

INSTANTIATE_TEST_SUITE_P(
    CApi, BindingDriverTest,
    ::testing::Values(
        Scenario{"TorchSgdAdamRaw", Kind::kTorchSgd, Kind::kTorchAdam, Convention::kRaw, false},
        Scenario{"TorchSgdAdamShared", Kind::kTorchSgd, Kind::kTorchAdam, Convention::kShared,
                 false},
        Scenario{"TorchAdamSgdRawUnscaleFirst", Kind::kTorchAdam, Kind::kTorchSgd, Convention::kRaw,
                 true},
        Scenario{"TorchSgdAdamSharedUnscaleFirst", Kind::kTorchSgd, Kind::kTorchAdam,
                 Convention::kShared, true},
        Scenario{"FusedSgdAdamRaw", Kind::kFusedSgd, Kind::kFusedAdam, Convention::kRaw, false},
        Scenario{"FusedAdamWSgdShared", Kind::kFusedAdamW, Kind::kFusedSgd, Convention::kShared,
                 false},
        Scenario{"FusedAdamAdamWShared", Kind::kFusedAdam, Kind::kFusedAdamW, Convention::kShared,
                 false},
        Scenario{"FusedAdamWAdamRaw", Kind::kFusedAdamW, Kind::kFusedAdam, Convention::kRaw, false},
        Scenario{"FusedSgdAdamWRawUnscaleFirst", Kind::kFusedSgd, Kind::kFusedAdamW,
                 Convention::kRaw, true},
        Scenario{"FusedAdamSgdSharedUnscaleFirst", Kind::kFusedAdam, Kind::kFusedSgd,
                 Convention::kShared, true},
        Scenario{"MixedTorchSgdFusedAdamRaw", Kind::kTorchSgd, Kind::kFusedAdam, Convention::kRaw,
                 false}),
    [](const ::testing::TestParamInfo<Scenario>& info) { return std::string(info.param.name); });

// A disabled scaler: both steps always run, the scale is 1.0, as in C++.
TEST(BindingDriverDisabledTest, StepsAlwaysLikeTheCppGradScaler) {
  ScalerConfig config = training_config();
  config.enabled = false;
  const RunSummary summary = run_side_by_side(
      {"Disabled", Kind::kTorchSgd, Kind::kFusedAdam, Convention::kShared, false}, config);
  EXPECT_EQ(summary.skipped[0] + summary.skipped[1], 0);
}

// Disabled, scale() hands back a new handle to the binding's tensor itself.
TEST(BindingDriverDisabledTest, ScaleReturnsANewHandleToTheTensorItself) {
  ScalerConfig config;
  config.enabled = false;
  const mixprec_grad_scaler_options options = config.c();
  CScaler s = make_c_scaler(&options);
  torch::Tensor loss = torch::ones({2});
  OwnedTensor scaled;
  MIXPREC_C_OK(mixprec_grad_scaler_scale(s.get(), &loss, scaled.out()));
  ASSERT_FALSE(scaled.empty());
  EXPECT_NE(static_cast<const void*>(scaled.out()[0]), static_cast<const void*>(&loss));
  EXPECT_TRUE(scaled.get().is_same(loss));
}

// A loop with options beyond PyTorch: hysteresis refilled on clean steps, a floor and a
// ceiling on the scale, and a history; telemetry follows the C++ scaler's.
TEST(BindingDriverExtensionsTest, OptionsBeyondPyTorchTrainLikeCpp) {
  ScalerConfig config = training_config();
  config.hysteresis = 2;
  config.refill_on_clean_step = true;
  config.min_scale = 256.0;
  config.max_scale = 4096.0;
  config.history_size = 4;
  const Models models = make_models();
  CSide c(clone_models(models), config, Kind::kFusedSgd, Kind::kTorchAdam, Convention::kShared);
  CppSide cpp(clone_models(models), config, Kind::kFusedSgd, Kind::kTorchAdam);
  const std::vector<Batch> batches = make_batches();
  double max_seen = 0.0;
  for (int it = 0; it < kIterations && !::testing::Test::HasFailure(); ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    const IterationReport c_report = train_iteration(c, batches[it], it, false);
    const IterationReport cpp_report = train_iteration(cpp, batches[it], it, false);
    expect_same_after_iteration(c, cpp, c_report, cpp_report);
    if (it < kUpdateToIteration) max_seen = std::max(max_seen, cpp.get_scale());
  }
  // The options were in force: the ceiling held, and hysteresis tolerated an overflow.
  EXPECT_EQ(max_seen, config.max_scale);
  EXPECT_LT(cpp.telemetry().backoffs, cpp.telemetry().skipped_steps);
}

// ---- the gradient-list path; the binding's own step of a fused optimizer ------------------------

/// The binding's own optimizer code for the gradient-list test: plain SGD, p -= lr * grad.
void hand_sgd(std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (auto& p : params) p.sub_(p.grad(), /*alpha=*/0.05);
}

bool is_zero(const torch::Tensor& found_inf) { return found_inf.item<float>() == 0.0f; }

/// Trains with unscale_grads_ per model, each model updated by the binding's own code unless its
/// found_inf is set, then update(). `fused`: the updates are mixprec's fused optimizers made
/// through the C API and stepped by the binding (cast back, ->step(), as tch-rs ato_step and
/// TorchSharp do), against mixprec::optim in C++; else hand_sgd on both sides.
void run_gradient_list(bool fused) {
  const Models models = make_models();
  Models cm = clone_models(models);
  Models rm = clone_models(models);
  const ScalerConfig config = training_config();
  const mixprec_grad_scaler_options options = config.c();
  CScaler cs = make_c_scaler(&options);
  GradScaler rs(config.cpp());
  std::vector<COptimizer> c_opts;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> r_opts;
  if (fused) {
    c_opts.push_back(make_c_optimizer(Kind::kFusedSgd, Convention::kRaw, cm.a));
    c_opts.push_back(make_c_optimizer(Kind::kFusedAdamW, Convention::kShared, cm.b));
    r_opts.push_back(make_cpp_optimizer(Kind::kFusedSgd, rm.a));
    r_opts.push_back(make_cpp_optimizer(Kind::kFusedAdamW, rm.b));
  }
  const std::vector<Batch> batches = make_batches();
  int skipped = 0;
  for (int it = 0; it < kIterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    for (Models* m : {&cm, &rm}) {
      for (auto* ps : {&m->a, &m->b}) {
        for (auto& p : *ps) p.mutable_grad() = torch::Tensor();
      }
    }
    // C: the binding's tensor handles only.
    torch::Tensor c_loss = loss_of(cm, batches[it]);
    {
      OwnedTensor scaled;
      MIXPREC_C_OK(mixprec_grad_scaler_scale(cs.get(), &c_loss, scaled.out()));
      scaled.get().backward();
    }
    inject_overflow(cm, it);
    rs.scale(loss_of(rm, batches[it])).backward();
    inject_overflow(rm, it);
    for (int which = 0; which < 2; ++which) {
      SCOPED_TRACE("model " + std::to_string(which));
      // Each list as a binding collects it (at_grad / THSTensor_grad handles), with a NULL entry
      // and an undefined tensor, both skipped.
      std::vector<torch::Tensor> c_grads{torch::Tensor()};
      std::vector<torch::Tensor> r_grads{torch::Tensor()};
      for (auto& p : cm.part(which)) c_grads.push_back(p.grad());
      for (auto& p : rm.part(which)) r_grads.push_back(p.grad());
      std::vector<void*> grad_handles = handles(c_grads);
      grad_handles.insert(grad_handles.begin() + 1, nullptr);
      OwnedTensor c_found;
      MIXPREC_C_OK(mixprec_grad_scaler_unscale_grads_(cs.get(), grad_handles.data(),
                                                      grad_handles.size(), c_found.out()));
      const torch::Tensor r_found = rs.unscale_grads_(r_grads);
      ASSERT_FALSE(c_found.empty());
      EXPECT_TRUE(bitwise_equal(c_found.get(), r_found)) << c_found.get() << " vs " << r_found;
      for (size_t i = 1; i < c_grads.size(); ++i) {
        EXPECT_TRUE(bitwise_equal(c_grads[i], r_grads[i])) << "unscaled grad " << i;
      }
      skipped += !is_zero(r_found);
      if (is_zero(c_found.get())) {
        if (fused) {
          c_opts[which].get().step();
        } else {
          hand_sgd(cm.part(which));
        }
      }
      if (is_zero(r_found)) {
        if (fused) {
          r_opts[which]->step();
        } else {
          hand_sgd(rm.part(which));
        }
      }
    }
    MIXPREC_C_OK(mixprec_grad_scaler_update(cs.get()));
    rs.update();
    double c_scale = 0.0;
    std::int64_t c_tracker = -1;
    MIXPREC_C_OK(mixprec_grad_scaler_get_scale(cs.get(), &c_scale));
    MIXPREC_C_OK(mixprec_grad_scaler_get_growth_tracker(cs.get(), &c_tracker));
    EXPECT_EQ(c_scale, rs.get_scale());
    EXPECT_EQ(c_tracker, rs.get_growth_tracker());
    expect_same_telemetry(c_telemetry(cs.get()), rs.telemetry());
    for (int which = 0; which < 2; ++which) {
      for (size_t i = 0; i < cm.part(which).size(); ++i) {
        EXPECT_TRUE(bitwise_equal(cm.part(which)[i], rm.part(which)[i]))
            << "parameter " << i << " of model " << which;
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
  // Overflows were met (a, b, both twice, b) and the scale moved both ways.
  EXPECT_EQ(skipped, 5);
  EXPECT_GE(rs.telemetry().backoffs, 4);
  EXPECT_GE(rs.telemetry().growths, 2);
}

TEST(BindingGradientListTest, BindingsOwnSgdFollowsTheCppGradScaler) { run_gradient_list(false); }

TEST(BindingGradientListTest, FusedOptimizersSteppedByTheBindingFollowCpp) {
  run_gradient_list(true);
}

// The binding's own step of each fused optimizer, without a scaler, in both conventions: the
// optimizer the C API made is mixprec::optim's, with the hyperparameters it was given.
TEST(BindingFusedOptimizerTest, OwnStepWithoutScalerMatchesMixprecOptim) {
  const std::vector<Batch> batches = make_batches();
  for (Kind kind : {Kind::kFusedSgd, Kind::kFusedAdam, Kind::kFusedAdamW}) {
    for (Convention conv : {Convention::kRaw, Convention::kShared}) {
      SCOPED_TRACE("kind " + std::to_string(static_cast<int>(kind)) + ", shared " +
                   std::to_string(conv == Convention::kShared));
      const Models models = make_models();
      Models cm = clone_models(models);
      Models rm = clone_models(models);
      COptimizer c_opt = make_c_optimizer(kind, conv, cm.a);
      auto r_opt = make_cpp_optimizer(kind, rm.a);
      for (int it = 0; it < 5; ++it) {
        c_opt.get().zero_grad();
        r_opt->zero_grad();
        loss_of(cm, batches[it]).backward();
        loss_of(rm, batches[it]).backward();
        c_opt.get().step();
        r_opt->step();
      }
      for (size_t i = 0; i < cm.a.size(); ++i) {
        EXPECT_TRUE(bitwise_equal(cm.a[i], rm.a[i])) << "parameter " << i;
        EXPECT_FALSE(bitwise_equal(cm.a[i], models.a[i])) << "parameter " << i << " never moved";
      }
    }
  }
}

// get_scale_async: NULL before the first scale(), then a handle sharing the scaler's scale.
TEST(BindingDriverScaleTest, GetScaleAsyncSharesTheScale) {
  const mixprec_grad_scaler_options options = training_config().c();
  CScaler s = make_c_scaler(&options);
  OwnedTensor before;
  MIXPREC_C_OK(mixprec_grad_scaler_get_scale_async(s.get(), before.out()));
  EXPECT_TRUE(before.empty());
  torch::Tensor loss = torch::ones({3});
  OwnedTensor scaled;
  MIXPREC_C_OK(mixprec_grad_scaler_scale(s.get(), &loss, scaled.out()));
  OwnedTensor scale;
  MIXPREC_C_OK(mixprec_grad_scaler_get_scale_async(s.get(), scale.out()));
  ASSERT_FALSE(scale.empty());
  EXPECT_EQ(scale.get().scalar_type(), torch::kFloat);
  EXPECT_EQ(scale.get().item<double>(), training_config().init_scale);
  MIXPREC_C_OK(mixprec_grad_scaler_update_to(s.get(), 8.0));
  EXPECT_EQ(scale.get().item<double>(), 8.0);  // the same storage as the scaler's
  GradScaler reference(training_config().cpp());
  EXPECT_TRUE(bitwise_equal(scaled.get(), reference.scale(loss)));
}

// ---- gradient clipping through the C API ---------------------------------------------------------

// scale, backward, clip_grad_norm (C: the scaler path for model a's optimizer; the plain path for
// model b's grads), step, update: norms, found_inf decisions and parameters follow C++ bit for bit,
// with overflows injected, for a torch::optim optimizer and a fused one in both conventions.
TEST(BindingClipTest, ClipThroughTheCApiFollowsTheCppGradScaler) {
  for (Kind kind : {Kind::kTorchSgd, Kind::kFusedAdamW}) {
    for (Convention conv : {Convention::kRaw, Convention::kShared}) {
      SCOPED_TRACE("kind " + std::to_string(static_cast<int>(kind)) + ", shared " +
                   std::to_string(conv == Convention::kShared));
      const Models models = make_models();
      Models cm = clone_models(models);
      Models rm = clone_models(models);
      const mixprec_grad_scaler_options options = training_config().c();
      CScaler cs = make_c_scaler(&options);
      GradScaler rs(training_config().cpp());
      COptimizer c_opt = make_c_optimizer(kind, conv, cm.a);
      auto r_opt = make_cpp_optimizer(kind, rm.a);
      const std::vector<Batch> batches = make_batches();
      int skipped = 0;
      for (int it = 0; it < kIterations; ++it) {
        SCOPED_TRACE("iteration " + std::to_string(it));
        c_opt.get().zero_grad();
        r_opt->zero_grad();
        for (auto& p : cm.b) p.mutable_grad() = torch::Tensor();
        for (auto& p : rm.b) p.mutable_grad() = torch::Tensor();
        torch::Tensor c_loss = loss_of(cm, batches[it]);
        {
          OwnedTensor scaled;
          MIXPREC_C_OK(mixprec_grad_scaler_scale(cs.get(), &c_loss, scaled.out()));
          scaled.get().backward();
        }
        rs.scale(loss_of(rm, batches[it])).backward();
        inject_overflow(cm, it);
        inject_overflow(rm, it);
        OwnedTensor c_norm;
        MIXPREC_C_OK(c_opt.shared()
                         ? mixprec_grad_scaler_clip_grad_norm_shared(cs.get(), c_opt.handle(), 0.5,
                                                                     2.0, c_norm.out())
                         : mixprec_grad_scaler_clip_grad_norm(cs.get(), c_opt.handle(), 0.5, 2.0,
                                                              c_norm.out()));
        const torch::Tensor r_norm = rs.clip_grad_norm_(*r_opt, 0.5);
        ASSERT_FALSE(c_norm.empty());
        EXPECT_TRUE(bitwise_equal(c_norm.get(), r_norm)) << c_norm.get() << " vs " << r_norm;
        // Model b's grads by the plain path (still scaled: the norm is of what it is given).
        std::vector<void*> b_handles = handles(cm.b);
        OwnedTensor c_plain;
        MIXPREC_C_OK(mixprec_clip_grad_norm(b_handles.data(), b_handles.size(), 1.0,
                                            std::numeric_limits<double>::infinity(), 0,
                                            c_plain.out()));
        const torch::Tensor r_plain =
            mixprec::clip_grad_norm_(rm.b, 1.0, std::numeric_limits<double>::infinity());
        EXPECT_TRUE(bitwise_equal(c_plain.get(), r_plain));
        int stepped = -1;
        MIXPREC_C_OK(c_opt.shared()
                         ? mixprec_grad_scaler_step_shared(cs.get(), c_opt.handle(), &stepped)
                         : mixprec_grad_scaler_step(cs.get(), c_opt.handle(), &stepped));
        rs.step(*r_opt);
        EXPECT_EQ(stepped == 1, rs.last_step_applied(*r_opt));
        skipped += stepped == 0;
        MIXPREC_C_OK(mixprec_grad_scaler_update(cs.get()));
        rs.update();
        double c_scale = 0.0;
        MIXPREC_C_OK(mixprec_grad_scaler_get_scale(cs.get(), &c_scale));
        EXPECT_EQ(c_scale, rs.get_scale());
        for (size_t i = 0; i < cm.a.size(); ++i) {
          EXPECT_TRUE(bitwise_equal(cm.a[i], rm.a[i])) << "parameter " << i;
          EXPECT_TRUE(bitwise_equal(cm.a[i].grad(), rm.a[i].grad())) << "grad " << i;
        }
        for (size_t i = 0; i < cm.b.size(); ++i) {
          EXPECT_TRUE(bitwise_equal(cm.b[i].grad(), rm.b[i].grad())) << "b grad " << i;
        }
        if (::testing::Test::HasFailure()) break;
      }
      EXPECT_EQ(skipped, 2) << "a overflows on iterations 3 and 11";
      for (size_t i = 0; i < cm.a.size(); ++i) {
        EXPECT_FALSE(bitwise_equal(cm.a[i], models.a[i])) << "parameter " << i << " never moved";
      }
    }
  }
}

}  // namespace
}  // namespace mixprec::c_api_test
