// mixprec::GradScaler: options, lazy state, the per-optimizer state machine and its errors,
// skipping, update overloads, disabled pass-through, state_dict refusals, printing.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <limits>
#include <sstream>

#include "mixprec/mixprec.h"
#include "mixprec/torch_version.h"
#include "torch/test_util.h"

namespace mixprec {
namespace {

// One parameter with a gradient of `value`, and SGD over it.
struct OneParam {
  torch::Tensor w = torch::ones({4}, torch::requires_grad());
  torch::optim::SGD opt{{w}, torch::optim::SGDOptions(1.0)};
  void set_grad(float value) { w.mutable_grad() = torch::full({4}, value); }
};

TEST(GradScalerTest, DefaultsArePyTorchs) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.get_growth_factor(), 2.0);
  EXPECT_EQ(s.get_backoff_factor(), 0.5);
  EXPECT_EQ(s.get_growth_interval(), 2000);
  EXPECT_TRUE(s.is_enabled());
  EXPECT_EQ(s.get_growth_tracker(), 0);
  EXPECT_FALSE(s.get_scale_async().defined());
}

TEST(GradScalerTest, InvalidOptionsThrowNamingOptionAndValue) {
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().growth_factor(0.5)),
                    "growth_factor must be > 1.0, got 0.5");
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().backoff_factor(1.5)),
                    "backoff_factor must be in (0, 1), got 1.5");
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().backoff_factor(0.0)), "backoff_factor");
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().growth_interval(0)),
                    "growth_interval must be >= 1, got 0");
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().init_scale(-1.0)),
                    "init_scale must be finite and > 0, got -1");
  EXPECT_THROW_WITH(GradScaler(GradScalerOptions().init_scale(std::nan(""))), "init_scale");
  // As PyTorch, a disabled scaler does not validate.
  EXPECT_NO_THROW(GradScaler(GradScalerOptions().enabled(false).growth_factor(0.5)));
}

TEST(GradScalerTest, ScaleCreatesStateLazilyOnTheOutputsDevice) {
  GradScaler s(GradScalerOptions().init_scale(4.0));
  const torch::Tensor out = s.scale(torch::full({3}, 2.0));
  EXPECT_TRUE(torch::equal(out, torch::full({3}, 8.0)));
  const torch::Tensor scale = s.get_scale_async();
  ASSERT_TRUE(scale.defined());
  EXPECT_EQ(scale.dim(), 0);
  EXPECT_EQ(scale.scalar_type(), torch::kFloat);
  EXPECT_TRUE(scale.device().is_cpu());
  EXPECT_EQ(s.get_scale(), 4.0);
}

TEST(GradScalerTest, ScaleKeepsReducedPrecisionDTypes) {
  GradScaler s(GradScalerOptions().init_scale(2.0));
  EXPECT_EQ(s.scale(torch::ones({2}, torch::kBFloat16)).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(s.scale(torch::ones({2}, torch::kDouble)).scalar_type(), torch::kDouble);
}

TEST(GradScalerTest, ScaleOfAVectorScalesEachAndIsTrackedByAutograd) {
  GradScaler s(GradScalerOptions().init_scale(2.0));
  torch::Tensor a = torch::full({1}, 4.0, torch::requires_grad());
  const auto outs = s.scale(std::vector<torch::Tensor>{a, torch::full({2}, 8.0)});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].item<float>(), 8.0f);
  EXPECT_TRUE(torch::equal(outs[1], torch::full({2}, 16.0)));
  outs[0].sum().backward();
  EXPECT_EQ(a.grad().item<float>(), 2.0f);
}

TEST(GradScalerTest, MethodsBeforeScaleSayScaleIsNone) {
  GradScaler s;
  OneParam p;
  EXPECT_THROW_WITH(s.unscale_(p.opt), "Attempted unscale_ but _scale is None.  This may indicate");
  EXPECT_THROW_WITH(s.step(p.opt), "Attempted step but _scale is None.");
  EXPECT_THROW_WITH(s.update(), "Attempted update but _scale is None.");
}

TEST(GradScalerTest, UnscaleDividesGradsAndMovesToUnscaled) {
  GradScaler s(GradScalerOptions().init_scale(4.0));
  OneParam p;
  s.scale(torch::ones({1}));
  p.set_grad(8.0f);
  EXPECT_EQ(s.stage(p.opt), OptState::kReady);
  s.unscale_(p.opt);
  EXPECT_EQ(s.stage(p.opt), OptState::kUnscaled);
  EXPECT_TRUE(torch::equal(p.w.grad(), torch::full({4}, 2.0)));
  const auto found = s.found_inf_per_device(p.opt);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].second.item<float>(), 0.0f);
}

TEST(GradScalerTest, StateMachineErrorsUsePyTorchsMessages) {
  GradScaler s;
  OneParam p;
  s.scale(torch::ones({1}));
  p.set_grad(1.0f);
  s.unscale_(p.opt);
  EXPECT_THROW_WITH(s.unscale_(p.opt),
                    "unscale_() has already been called on this optimizer since the last update().");
  s.step(p.opt);
  EXPECT_EQ(s.stage(p.opt), OptState::kStepped);
  EXPECT_THROW_WITH(s.unscale_(p.opt), "unscale_() is being called after step().");
  EXPECT_THROW_WITH(s.step(p.opt), "step() has already been called since the last update().");
  s.update();
  EXPECT_EQ(s.stage(p.opt), OptState::kReady);
  EXPECT_NO_THROW(s.unscale_(p.opt));  // a new iteration
}

TEST(GradScalerTest, StepWithoutGradsAndUpdateWithoutStepAreErrors) {
  GradScaler s;
  OneParam p;  // no grad set
  s.scale(torch::ones({1}));
  EXPECT_THROW_WITH(s.step(p.opt), "No inf checks were recorded for this optimizer.");
  GradScaler s2;
  s2.scale(torch::ones({1}));
  EXPECT_THROW_WITH(s2.update(), "No inf checks were recorded prior to update.");
}

TEST(GradScalerTest, Fp16GradsAreRefused) {
  GradScaler s;
  torch::Tensor w = torch::ones({2}, torch::TensorOptions().dtype(torch::kHalf).requires_grad(true));
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(1.0));
  w.mutable_grad() = torch::ones({2}, torch::kHalf);
  s.scale(torch::ones({1}));
  EXPECT_THROW_WITH(s.unscale_(opt), "Attempting to unscale FP16 gradients.");
  EXPECT_EQ(s.stage(opt), OptState::kReady);  // not reached UNSCALED
}

TEST(GradScalerTest, StepIsAppliedOnCleanGradsAndSkippedOnInfOrNaN) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    GradScaler s(GradScalerOptions().init_scale(2.0).growth_interval(1));
    OneParam p;
    s.scale(torch::ones({1}));
    p.set_grad(2.0f);  // unscaled: 1.0, so SGD(lr=1) gives w = 0
    s.step(p.opt);
    s.update();
    EXPECT_TRUE(torch::equal(p.w, torch::zeros({4})));
    EXPECT_EQ(s.get_scale(), 4.0);  // interval 1: grows at once
    p.set_grad(1.0f);
    p.w.mutable_grad()[2] = bad;
    const torch::Tensor result = s.step(p.opt);
    EXPECT_FALSE(result.defined());
    EXPECT_TRUE(torch::equal(p.w, torch::zeros({4})));  // untouched
    s.update();
    EXPECT_EQ(s.get_scale(), 2.0);
    EXPECT_EQ(s.get_growth_tracker(), 0);
  }
}

TEST(GradScalerTest, NaNLossSkipsTheStepAndBacksOff) {
  torch::nn::Linear model(3, 1);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  GradScaler s(GradScalerOptions().init_scale(1024.0));
  const torch::Tensor before = model->weight.clone();
  const torch::Tensor loss = model->forward(torch::ones({2, 3})).sum() * std::nanf("");
  s.scale(loss).backward();
  EXPECT_FALSE(s.step(opt).defined());
  s.update();
  EXPECT_TRUE(torch::equal(model->weight, before));
  EXPECT_EQ(s.get_scale(), 512.0);
}

TEST(GradScalerTest, ZeroElementGradsAreChecked) {
  torch::Tensor w = torch::zeros({0}, torch::requires_grad());
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(1.0));
  w.mutable_grad() = torch::zeros({0});
  GradScaler s;
  s.scale(torch::ones({1}));
  s.step(opt);  // a recorded check, no overflow
  EXPECT_TRUE(s.last_step_applied(opt));
  s.update();
  EXPECT_EQ(s.get_growth_tracker(), 1);
}

TEST(GradScalerTest, StepReturnsTheOptimizersResult) {
  GradScaler s;
  torch::Tensor w = torch::ones({1}, torch::requires_grad());
  // An optimizer whose step() returns a defined tensor (like a closure's loss).
  struct Returns42 : torch::optim::SGD {
    using torch::optim::SGD::SGD;
    torch::Tensor step(LossClosure) override { return torch::full({}, 42.0); }
  } opt({w}, torch::optim::SGDOptions(1.0));
  s.scale(torch::ones({1}));
  w.mutable_grad() = torch::ones({1});
  EXPECT_EQ(s.step(opt).item<float>(), 42.0f);
}

TEST(GradScalerTest, UpdateWithNewScaleValueOrTensor) {
  GradScaler s(GradScalerOptions().init_scale(8.0));
  s.scale(torch::ones({1}));
  s.update(3.0);
  EXPECT_EQ(s.get_scale(), 3.0);
  torch::Tensor t = torch::full({1}, 5.0);
  s.update(t);
  t.fill_(7.0);  // the scaler copied the value
  EXPECT_EQ(s.get_scale(), 5.0);
  // Python's text, of the PyTorch this LibTorch is (torch/amp/grad_scaler.py in each wheel): one
  // sentence from 2.9; up to 2.8 a backslash continuation inside the string left the next line's
  // indentation in it, 21 spaces after "or". python.messages holds this against PyTorch itself.
  const std::string msg =
      std::string("new_scale should be a float or a 1-element torch.cuda.FloatTensor or") +
      (MIXPREC_TORCH_AT_LEAST(2, 9) ? " " : std::string(21, ' ')) +
      "torch.FloatTensor with requires_grad=False.";
  EXPECT_THROW_WITH(s.update(torch::ones({2})), msg);
  EXPECT_THROW_WITH(s.update(torch::ones({1}, torch::requires_grad())), msg);
  EXPECT_EQ(s.get_scale(), 5.0);
}

TEST(GradScalerTest, SettersTakeEffectAtTheNextUpdate) {
  GradScaler s(GradScalerOptions().init_scale(8.0).growth_interval(3));
  OneParam p;
  s.scale(torch::ones({1}));
  s.set_growth_interval(1);
  s.set_growth_factor(3.0);
  s.set_backoff_factor(0.25);
  EXPECT_EQ(s.get_growth_interval(), 1);
  EXPECT_EQ(s.get_growth_factor(), 3.0);
  EXPECT_EQ(s.get_backoff_factor(), 0.25);
  p.set_grad(1.0f);
  s.step(p.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 24.0);
  p.set_grad(std::numeric_limits<float>::infinity());
  s.step(p.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 6.0);
}

TEST(GradScalerTest, DisabledScalerIsAPassThrough) {
  GradScaler s(GradScalerOptions().enabled(false));
  OneParam p;
  const torch::Tensor x = torch::full({2}, 3.0);
  const torch::Tensor y = s.scale(x);
  EXPECT_TRUE(y.is_same(x));
  p.set_grad(std::numeric_limits<float>::infinity());
  s.unscale_(p.opt);  // no-op
  s.step(p.opt);      // steps even on inf: no checks when disabled
  EXPECT_TRUE(torch::isinf(p.w).all().item<bool>());
  s.update();
  EXPECT_EQ(s.get_scale(), 1.0);
  EXPECT_FALSE(s.is_enabled());
  EXPECT_EQ(s.state_dict().size(), 0u);
  EXPECT_NO_THROW(s.load_state_dict(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get())));
}

TEST(GradScalerTest, StateDictHasPyTorchsKeysInOrderAndTypes) {
  GradScaler s(GradScalerOptions().init_scale(3.0).growth_factor(4.0).backoff_factor(0.5).growth_interval(2));
  const auto sd = s.state_dict();
  std::vector<std::string> keys;
  for (const auto& e : sd) keys.push_back(e.key().toStringRef());
  EXPECT_EQ(keys, (std::vector<std::string>{"scale", "growth_factor", "backoff_factor",
                                            "growth_interval", "_growth_tracker"}));
  EXPECT_TRUE(sd.at("scale").isDouble());
  EXPECT_EQ(sd.at("scale").toDouble(), 3.0);
  EXPECT_TRUE(sd.at("growth_interval").isInt());
  EXPECT_EQ(sd.at("growth_interval").toInt(), 2);
  EXPECT_TRUE(sd.at("_growth_tracker").isInt());
}

TEST(GradScalerTest, LoadStateDictRefusesBadDictsAndLeavesScalerUnchanged) {
  GradScaler s(GradScalerOptions().init_scale(16.0));
  s.scale(torch::ones({1}));
  const auto empty = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  EXPECT_THROW_WITH(s.load_state_dict(empty), "The source state dict is empty, possibly because");
  GradScaler source(GradScalerOptions().init_scale(2.0).growth_interval(7));
  auto missing = source.state_dict();
  ASSERT_EQ(missing.erase("growth_interval"), 1u);
  EXPECT_THROW_WITH(s.load_state_dict(missing), "missing key \"growth_interval\"");
  auto wrong = source.state_dict();
  wrong.insert_or_assign("_growth_tracker", 1.5);
  EXPECT_THROW_WITH(s.load_state_dict(wrong), "\"_growth_tracker\" must be an int");
  EXPECT_EQ(s.get_scale(), 16.0);  // nothing was applied
  EXPECT_EQ(s.get_growth_interval(), 2000);
  s.load_state_dict(source.state_dict());
  EXPECT_EQ(s.get_scale(), 2.0);
  EXPECT_EQ(s.get_growth_interval(), 7);
}

TEST(GradScalerTest, PrintsAOneLineSummary) {
  std::ostringstream out;
  out << GradScaler();
  EXPECT_EQ(out.str(),
            "GradScaler(scale=65536, growth_factor=2, backoff_factor=0.5, growth_interval=2000, "
            "enabled=true)");
}

TEST(GradScalerTest, SeveralOptimizersShareOneUpdate) {
  GradScaler s(GradScalerOptions().init_scale(8.0).growth_interval(1));
  OneParam a, b;
  s.scale(torch::ones({1}));
  a.set_grad(8.0f);
  b.set_grad(std::numeric_limits<float>::infinity());
  s.step(a.opt);
  s.step(b.opt);
  s.update();  // b overflowed: the one update backs off
  EXPECT_EQ(s.get_scale(), 4.0);
  EXPECT_TRUE(torch::equal(a.w, torch::zeros({4})));
  EXPECT_TRUE(torch::equal(b.w, torch::ones({4})));
}

TEST(GradScalerTest, StepsAfterZeroGradOfEitherLibTorch) {
  // LibTorch 2.x's zero_grad() sets gradients to undefined (Python's set_to_none=True); 1.13's
  // fills them with zeros. The next scaled backward must give the same step either way.
  torch::manual_seed(3);
  torch::nn::Linear model(3, 1);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  GradScaler scaler(GradScalerOptions().init_scale(1024));
  const torch::Tensor x = torch::randn({4, 3}), y = torch::zeros({4, 1});
  torch::mse_loss(model->forward(x), y).backward();
  optimizer.zero_grad();
  if (MIXPREC_TORCH_2) {
    EXPECT_FALSE(model->weight.grad().defined());
  } else {
    EXPECT_TRUE(torch::equal(model->weight.grad(), torch::zeros_like(model->weight)));
  }
  // The expected step, without a scaler: w - lr * dL/dw.
  const torch::Tensor w = model->weight.detach().clone().requires_grad_();
  torch::mse_loss(torch::nn::functional::linear(x, w, model->bias.detach()), y).backward();
  const torch::Tensor expected = w.detach() - 0.1 * w.grad();
  scaler.scale(torch::mse_loss(model->forward(x), y)).backward();
  scaler.step(optimizer);
  scaler.update();
  EXPECT_TRUE(torch::allclose(model->weight, expected, 1e-6, 1e-7));
  EXPECT_EQ(scaler.get_growth_tracker(), 1);
}

// scaler.step(optimizer, closure): a disabled scaler forwards the closure to the optimizer and
// returns its loss, as Python's; an enabled one refuses it with Python's message.
TEST(GradScalerTest, AClosureGoesToTheOptimizerOnlyWhenDisabled) {
  torch::Tensor w = torch::ones({2}, torch::requires_grad());
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.1));
  int calls = 0;
  const auto closure = [&] {
    ++calls;
    opt.zero_grad();
    torch::Tensor loss = (w * w).sum();
    loss.backward();
    return loss;
  };
  GradScaler disabled(GradScalerOptions().enabled(false));
  const torch::Tensor loss = disabled.step(opt, closure);
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(loss.defined());
  EXPECT_EQ(loss.item<float>(), 2.0f);
  EXPECT_TRUE(torch::allclose(w.detach(), torch::full({2}, 0.8f)));  // w - 0.1 * 2w
  GradScaler enabled;
  enabled.scale(torch::ones({}));
  EXPECT_THROW_WITH(enabled.step(opt, closure),
                    "Closure use is not currently supported if GradScaler is enabled.");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace mixprec
