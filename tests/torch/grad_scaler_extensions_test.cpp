// GradScaler beyond PyTorch: hysteresis, min/max scale and the at-min policies, step outcome,
// telemetry and history, events, overflow diagnostics, versioned checkpoints and their refusals.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/mixprec.h"
#include "torch/test_util.h"

namespace mixprec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One parameter, SGD(lr=1), and one iteration with a chosen gradient value.
struct Loop {
  torch::Tensor w = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD opt{{w}, torch::optim::SGDOptions(1.0)};
  GradScaler scaler;
  explicit Loop(GradScalerOptions o) : scaler(std::move(o)) { scaler.scale(torch::ones({1})); }
  // The gradient arrives scaled, as backward of a scaled loss would give it.
  void iterate(float unscaled_grad) {
    w.mutable_grad() = torch::full({3}, unscaled_grad) * scaler.get_scale();
    scaler.step(opt);
    scaler.update();
  }
};

// Gives `scaler` a found_inf reducer that throws on its first call (a timed-out collective) and
// counts its calls, then one scale() and w's grad 8 (2 unscaled at the scale 4).
void start_with_a_reducer_that_throws_once(GradScaler& scaler, torch::Tensor& w, int& calls) {
  scaler.set_found_inf_reducer([&calls](at::Tensor&) {
    if (++calls == 1) throw std::runtime_error("collective timed out");
  });
  scaler.scale(torch::ones({1}));
  w.mutable_grad() = torch::full({3}, 8.0f);
}

// A reducer that throws once (a timed-out collective) after unscale_() divided the grads: a retry
// neither divides them again nor decides without the reduction, through unscale_() + step() and
// through step() alone.
TEST(GradScalerExtensionsTest, AReducerThatThrowsNeverMakesARetryUnscaleTwice) {
  for (bool explicit_unscale : {true, false}) {
    torch::Tensor w = torch::zeros({3}, torch::requires_grad());
    torch::optim::SGD opt({w}, torch::optim::SGDOptions(1.0));
    GradScaler scaler(GradScalerOptions().init_scale(4.0));
    int calls = 0;
    start_with_a_reducer_that_throws_once(scaler, w, calls);
    if (explicit_unscale) {
      EXPECT_THROW(scaler.unscale_(opt), std::runtime_error);
      EXPECT_THROW(scaler.unscale_(opt), c10::Error);  // "already been called": no second division
    } else {
      EXPECT_THROW(scaler.step(opt), std::runtime_error);
    }
    EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 2.0f))) << "grads divided more than once";
    scaler.step(opt);  // the retry reduces, then steps
    EXPECT_EQ(calls, 2);
    EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 2.0f)));
    EXPECT_TRUE(torch::equal(w.detach(), torch::full({3}, -2.0f)));
    scaler.update();
    EXPECT_EQ(calls, 2);
  }
}

// The same through the fused optimizers' path, where step() checks the still-scaled grads and
// the optimizer unscales them itself: after a throwing reducer, the retried step() runs the
// collective once more, not twice (a rank that reduced twice would wait on a collective its peers
// never start), and steps once, on the unscaled grads.
TEST(GradScalerExtensionsTest, AReducerThatThrowsMakesAFusedRetryReduceOnce) {
  const auto make = [](const std::string& name, torch::Tensor w)
      -> std::unique_ptr<torch::optim::Optimizer> {
    if (name == "SGD") return std::make_unique<optim::SGD>(std::vector<at::Tensor>{w},
                                                          torch::optim::SGDOptions(1.0));
    if (name == "Adam") return std::make_unique<optim::Adam>(std::vector<at::Tensor>{w},
                                                            torch::optim::AdamOptions(1.0));
    return std::make_unique<optim::AdamW>(std::vector<at::Tensor>{w},
                                          torch::optim::AdamWOptions(1.0).weight_decay(0.0));
  };
  for (const std::string name : {"SGD", "Adam", "AdamW"}) {
    SCOPED_TRACE(name);
    torch::Tensor w = torch::zeros({3}, torch::requires_grad());
    std::unique_ptr<torch::optim::Optimizer> opt = make(name, w);
    GradScaler scaler(GradScalerOptions().init_scale(4.0));
    int calls = 0;
    start_with_a_reducer_that_throws_once(scaler, w, calls);
    EXPECT_THROW(scaler.step(*opt), std::runtime_error);
    EXPECT_TRUE(torch::equal(w.detach(), torch::zeros({3}))) << "stepped before the reduction";
    scaler.step(*opt);  // the retry reduces once, then steps
    EXPECT_EQ(calls, 2) << "the retried step() ran the collective " << calls - 1 << " times";
    // One step of lr 1 on the unscaled grad 2: SGD moves by 2, Adam(W)'s first step by lr.
    const float moved = name == "SGD" ? -2.0f : -1.0f;
    EXPECT_TRUE(torch::allclose(w.detach(), torch::full({3}, moved))) << w;
    scaler.update();
    EXPECT_EQ(calls, 2);
    EXPECT_TRUE(scaler.last_step_applied(*opt));
  }
}

// Note [Last steps are bounded and fingerprinted]: the outcome of a gone optimizer's last step
// is dropped at the next update() (its found_inf no longer kept alive), and a new optimizer that
// reuses its address over other parameters is not taken for it.
TEST(GradScalerExtensionsTest, LastStepsOfGoneOptimizersAreDroppedAndNeverInherited) {
  using torch::optim::SGD;
  using torch::optim::SGDOptions;
  GradScaler scaler;
  scaler.scale(torch::ones({1}));
  alignas(SGD) unsigned char storage[sizeof(SGD)];
  torch::Tensor p = torch::zeros({2}, torch::requires_grad());
  SGD* old = new (storage) SGD(std::vector<torch::Tensor>{p}, SGDOptions(1.0));
  p.mutable_grad() = torch::ones({2});
  scaler.step(*old);
  scaler.update();
  ASSERT_TRUE(scaler.last_step_applied(*old));
  const c10::weak_intrusive_ptr<c10::TensorImpl> old_found(
      scaler.last_step_found_inf(*old).getIntrusivePtr());
  old->~SGD();
  torch::Tensor q = torch::zeros({2}, torch::requires_grad());
  SGD* reused = new (storage) SGD(std::vector<torch::Tensor>{q}, SGDOptions(1.0));
  EXPECT_FALSE(scaler.last_step_applied(*reused)) << "inherited the dead optimizer's outcome";
  EXPECT_FALSE(scaler.last_step_found_inf(*reused).defined());
  // An iteration without the gone optimizer drops its entry and its found_inf tensor.
  torch::Tensor r = torch::zeros({2}, torch::requires_grad());
  SGD other(std::vector<torch::Tensor>{r}, SGDOptions(1.0));
  r.mutable_grad() = torch::ones({2});
  scaler.step(other);
  scaler.update();
  EXPECT_TRUE(old_found.expired()) << "the scaler still holds a gone optimizer's found_inf";
  reused->~SGD();
}

TEST(GradScalerExtensionsTest, DefaultsKeepPyTorchsStateDict) {
  GradScaler s;
  EXPECT_EQ(s.state_dict().size(), 5u);
  EXPECT_FALSE(GradScalerOptions().uses_extensions());
  EXPECT_TRUE(GradScalerOptions().hysteresis(2).uses_extensions());
}

TEST(GradScalerExtensionsTest, HysteresisSkipsEveryOverflowButBacksOffOnlyAfterN) {
  Loop l(GradScalerOptions().init_scale(64.0).hysteresis(2));
  l.iterate(kInf);
  EXPECT_EQ(l.scaler.get_scale(), 64.0);  // tolerated
  EXPECT_FALSE(l.scaler.last_step_applied(l.opt));
  EXPECT_EQ(l.scaler.telemetry().hysteresis_tracker, 1);
  l.iterate(1.0f);
  EXPECT_TRUE(l.scaler.last_step_applied(l.opt));
  l.iterate(kInf);
  EXPECT_EQ(l.scaler.get_scale(), 32.0);  // second overflow, no growth in between
}

TEST(GradScalerExtensionsTest, MinAndMaxScaleClamp) {
  Loop l(GradScalerOptions().init_scale(1.0).min_scale(0.5).max_scale(4.0).growth_interval(1));
  l.iterate(kInf);
  l.iterate(kInf);
  EXPECT_EQ(l.scaler.get_scale(), 0.5);
  for (int i = 0; i < 5; ++i) l.iterate(1.0f);
  EXPECT_EQ(l.scaler.get_scale(), 4.0);
}

TEST(GradScalerExtensionsTest, AtMinThrowSaysWhatToTry) {
  Loop l(GradScalerOptions().init_scale(2.0).min_scale(1.0).at_min_scale(AtMinScale::kThrow));
  l.iterate(kInf);  // 2 -> 1: reaches the minimum, no throw yet
  EXPECT_EQ(l.scaler.get_scale(), 1.0);
  EXPECT_THROW_WITH(l.iterate(kInf), "Try bf16");
  EXPECT_EQ(l.scaler.get_scale(), 1.0);  // the update itself was applied
}

TEST(GradScalerExtensionsTest, AtMinCallbackIsCalledWithTheScale) {
  std::vector<double> calls;
  Loop l(GradScalerOptions().init_scale(1.0).min_scale(1.0).at_min_scale(AtMinScale::kCallback)
             .on_min_scale([&](double s) { calls.push_back(s); }));
  l.iterate(kInf);
  l.iterate(1.0f);
  l.iterate(kInf);
  EXPECT_EQ(calls, (std::vector<double>{1.0, 1.0}));
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().at_min_scale(AtMinScale::kCallback)),
                    "no on_min_scale callback");
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().hysteresis(0)), "hysteresis must be >= 1, got 0");
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().min_scale(8).max_scale(4)), "must not exceed");
}

TEST(GradScalerExtensionsTest, TelemetryCountersFollowAHandComputedRun) {
  Loop l(GradScalerOptions().init_scale(16.0).growth_interval(2).history_size(3));
  const float grads[] = {1, 1, kInf, kInf, 1, 1, 1};  // grow, backoff x2, grow
  for (float g : grads) l.iterate(g);
  const ScalerTelemetry t = l.scaler.telemetry();
  EXPECT_EQ(t.iterations, 7);
  EXPECT_EQ(t.skipped_steps, 2);
  EXPECT_EQ(t.growths, 2);
  EXPECT_EQ(t.backoffs, 2);
  EXPECT_EQ(t.consecutive_overflows, 0);
  EXPECT_EQ(t.last_overflow_iteration, 3);
  EXPECT_EQ(l.scaler.get_scale(), 16.0);  // 16 -> 32 -> 16 -> 8 -> 16
  const auto h = l.scaler.history();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].iteration, 4);
  EXPECT_EQ(h[0].scale, 8.0);
  EXPECT_EQ(h[1].scale, 16.0);
  EXPECT_EQ(h[2].iteration, 6);
  EXPECT_FALSE(h[2].overflow);
}

TEST(GradScalerExtensionsTest, EventCallbacksSeeBackoffGrowthAndSkip) {
  Loop l(GradScalerOptions().init_scale(8.0).growth_interval(1));
  std::vector<std::uint32_t> events;
  l.scaler.on_event([&](const ScaleEventInfo& e) { events.push_back(e.events); });
  l.iterate(1.0f);
  l.iterate(kInf);
  EXPECT_EQ(events, (std::vector<std::uint32_t>{core::kEventGrowth,
                                                core::kEventOverflow | core::kEventBackoff}));
}

TEST(GradScalerExtensionsTest, StepOutcomeSurvivesUpdateAndHasATensorForm) {
  Loop l{GradScalerOptions()};
  EXPECT_FALSE(l.scaler.last_step_found_inf(l.opt).defined());
  l.iterate(kInf);
  EXPECT_FALSE(l.scaler.last_step_applied(l.opt));
  EXPECT_EQ(l.scaler.last_step_found_inf(l.opt).item<float>(), 1.0f);
  l.iterate(0.5f);
  EXPECT_TRUE(l.scaler.last_step_applied(l.opt));
  EXPECT_EQ(l.scaler.last_step_found_inf(l.opt).item<float>(), 0.0f);
}

TEST(GradScalerExtensionsTest, DiagnosticsNameTheOverflowingParameters) {
  torch::nn::Sequential model(torch::nn::Linear(3, 2), torch::nn::Linear(2, 1));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  GradScaler scaler(GradScalerOptions().diagnose_overflow(true));
  scaler.set_parameter_names(model->named_parameters());
  int calls = 0;
  scaler.on_overflow([&](const OverflowReport&) { ++calls; });
  scaler.scale(model->forward(torch::ones({1, 3}))).sum().backward();
  EXPECT_EQ(scaler.last_overflow_report(), nullptr);
  auto params = model->parameters();
  params[0].mutable_grad()[1][2] = std::nanf("");  // "0.weight", shape [2, 3]: flat index 5
  params[2].mutable_grad()[0][1] = kInf;           // "1.weight", shape [1, 2]: flat index 1
  params[2].mutable_grad()[0][0] = -kInf;
  scaler.step(opt);
  scaler.update();
  ASSERT_NE(scaler.last_overflow_report(), nullptr);
  const auto& report = *scaler.last_overflow_report();
  ASSERT_EQ(report.parameters.size(), 2u);
  EXPECT_EQ(report.parameters[0].name, "0.weight");
  EXPECT_EQ(report.parameters[0].index, 0);
  EXPECT_EQ(report.parameters[0].nan_count, 1);
  EXPECT_EQ(report.parameters[0].inf_count, 0);
  EXPECT_EQ(report.parameters[0].first_index, 5);
  EXPECT_EQ(report.parameters[1].name, "1.weight");
  EXPECT_EQ(report.parameters[1].index, 2);
  EXPECT_EQ(report.parameters[1].inf_count, 2);
  EXPECT_EQ(report.parameters[1].first_index, 0);
  EXPECT_EQ(report.parameters[1].first_value, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(calls, 1);
}

TEST(GradScalerExtensionsTest, ExtendedStateDictIsVersionedAndRoundTrips) {
  const auto options = GradScalerOptions().init_scale(64.0).hysteresis(3).growth_interval(2)
                           .min_scale(0.25).history_size(4);
  Loop a(options);
  const float grads[] = {1, kInf, 1, 1, kInf};
  for (float g : grads) a.iterate(g);
  const auto sd = a.scaler.state_dict();
  EXPECT_EQ(sd.at("mixprec_format").toInt(), 1);
  EXPECT_EQ(sd.at("hysteresis").toInt(), 3);
  GradScaler b{GradScalerOptions()};
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), a.scaler.get_scale());
  const ScalerTelemetry ta = a.scaler.telemetry(), tb = b.telemetry();
  EXPECT_EQ(tb.iterations, ta.iterations);
  EXPECT_EQ(tb.hysteresis_tracker, ta.hysteresis_tracker);
  EXPECT_EQ(tb.skipped_steps, ta.skipped_steps);
  ASSERT_EQ(b.history().size(), a.scaler.history().size());
  EXPECT_EQ(b.history().back().scale, a.scaler.history().back().scale);
}

TEST(GradScalerExtensionsTest, ResumingAtIterationKIsBitIdenticalToAnUninterruptedRun) {
  const auto options = GradScalerOptions().init_scale(1024.0).hysteresis(2).growth_interval(3);
  torch::manual_seed(3);
  std::vector<float> grads;
  for (int i = 0; i < 40; ++i) grads.push_back(i % 7 == 3 ? kInf : torch::randn({}).item<float>());
  Loop whole(options);
  for (float g : grads) whole.iterate(g);
  Loop first(options);
  for (int i = 0; i < 17; ++i) first.iterate(grads[i]);
  // Checkpoint through bytes, as a real resume would.
  const std::vector<char> bytes = torch::pickle_save(first.scaler.state_dict());
  Loop second(options);
  second.scaler.load_state_dict(torch::pickle_load(bytes).toGenericDict());
  {
    torch::NoGradGuard no_grad;
    second.w.copy_(first.w);
  }
  for (int i = 17; i < 40; ++i) second.iterate(grads[i]);
  EXPECT_EQ(second.scaler.get_scale(), whole.scaler.get_scale());
  EXPECT_EQ(second.scaler.telemetry().hysteresis_tracker, whole.scaler.telemetry().hysteresis_tracker);
  EXPECT_TRUE(torch::equal(second.w, whole.w));
}

TEST(GradScalerExtensionsTest, MalformedDictsAreRefusedNamingTheKeyAndChangeNothing) {
  Loop source(GradScalerOptions().hysteresis(2));
  GradScaler target(GradScalerOptions().init_scale(8.0).hysteresis(2));
  auto check = [&](c10::impl::GenericDict sd, const std::string& text) {
    EXPECT_THROW_WITH(target.load_state_dict(sd), text);
    EXPECT_EQ(target.get_scale(), 8.0);
  };
  auto bad = [&]() { return source.scaler.state_dict().copy(); };
  auto d = bad();
  d.insert_or_assign("scale", std::numeric_limits<double>::infinity());
  check(d, "\"scale\" must be finite and > 0");
  d = bad();
  d.insert_or_assign("scale", 1e300);  // finite as a double, not as the float32 the scale is
  check(d, "\"scale\" must be finite and > 0 as a float32");
  d = bad();
  d.insert_or_assign("scale", 0.0);
  check(d, "\"scale\" must be finite and > 0");
  d = bad();
  d.insert_or_assign("_growth_tracker", static_cast<std::int64_t>(-1));
  check(d, "\"_growth_tracker\" must be in [0, 2^31)");
  d = bad();
  d.insert_or_assign("mixprec_format", static_cast<std::int64_t>(99));
  check(d, "unknown \"mixprec_format\" 99");
  d = bad();
  d.insert_or_assign("_counters", std::string("x"));
  check(d, "\"_counters\" must be a list of 8 ints");
  d = bad();
  d.insert_or_assign("hysteresis_refill", std::string("sometimes"));
  check(d, "\"hysteresis_refill\" must be");
  d = bad();
  d.insert_or_assign("growth_factor", std::string("2"));
  check(d, "\"growth_factor\" must be a float");
}

TEST(GradScalerExtensionsTest, APyTorchDictLoadsWithDefaultsForTheRest) {
  Loop l(GradScalerOptions().hysteresis(3));
  l.iterate(kInf);  // tracker 3 -> 2
  GradScaler python_like;  // five keys only
  l.scaler.load_state_dict(python_like.state_dict());
  EXPECT_EQ(l.scaler.get_scale(), 65536.0);
  EXPECT_EQ(l.scaler.telemetry().hysteresis_tracker, 3);  // fresh
  EXPECT_EQ(l.scaler.telemetry().iterations, 0);
  EXPECT_EQ(l.scaler.state_dict().at("hysteresis").toInt(), 3);  // own option kept
}

}  // namespace
}  // namespace mixprec
