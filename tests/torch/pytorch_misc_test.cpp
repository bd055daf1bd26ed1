// PyTorch's GradScaler tests of state_dict/pickling and of the fused-optimizer protocol
// (spec/pytorch-gradscaler.md §6.1, tests 4, 5, 14, 17, 23 and 28), ported to mixprec on the CPU.
//
// Not ported (numbered as in PyTorch's test/test_cuda.py and test_torch.py), and why:
//  6  test_grad_scaling_autocast, Adam/AdamW variant: see pytorch_scaling_test.cpp (no fp16
//     autocast on the CPU in LibTorch 1.13; in fp32 there is no failure to assert). Its
//     return_found_inf run: newest PyTorch only, mixprec's step() has no such flag.
//  14 test_grad_scaler_pass_itself, Optimizer1: the legacy `grad_scaler=` keyword protocol and
//     its FutureWarning are Python-only (C++ step() has no keyword arguments). Optimizer2 is
//     ported below.
//  15 test_grad_scaler_deprecated_warning: torch.cuda/cpu.amp.GradScaler wrappers and Python's
//     FutureWarning do not exist in C++.
//  16 test_grad_scaling_autocast_fused_optimizers: ported in pytorch_scaling_test.cpp against
//     mixprec's fused optimizers (LibTorch 1.13 has none), in fp32; `maximize` inputs left out
//     (LibTorch 1.13's optimizers have no such option).
//  17 test_grad_scaler_with_preset_grad_scale: CUDA-only in PyTorch; ported below adapted to the
//     CPU with a small optimizer that honours the SupportsAmpScaling contract.
//  18 test_graph_grad_scaling, 19 test_graph_scaling_fused_optimizers: CUDA graphs.
//  20 test_grad_scaling_device_as_key, 21 test_grad_scaling_scale, 22 test_grad_scaling_multigpu,
//     and the cuda:1 parts of test 1: need two or more GPUs.
//  23 TestShardGradScaler.test_grad_scaling: nested tuples/lists have no C++ counterpart; ported
//     below with the leaves flattened into one vector.
//  26 TestShardedGradScalerParityWithDDP, 27 TestFullyShardGradientScaler: FSDP/DDP on >= 2 GPUs.
//  28 test_fused_does_not_step_if_foundinf: CUDA fused kernels in PyTorch; ported below as
//     GradScaler's side of the contract.
#include <gtest/gtest.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "scaling_case.h"

namespace {

using mixprec_test::tensors_close;

// A tiny optimizer (plain SGD) that unscales and skips by itself, honouring amp_optimizer.h:
// divide grads by grad_scale (writing the quotient back), leave params, grads and the step
// counter untouched when found_inf != 0 — with tensor selects, no host read. Records what
// GradScaler handed it.
class AmpScalingSGD : public torch::optim::Optimizer, public mixprec::SupportsAmpScaling {
 public:
  AmpScalingSGD(std::vector<torch::Tensor> params, double lr)
      : torch::optim::Optimizer(std::move(params), std::make_unique<torch::optim::SGDOptions>(lr)),
        lr_(lr) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    ++calls;
    seen_grad_scale = grad_scale.defined() ? grad_scale.clone() : torch::Tensor();
    seen_found_inf = found_inf.defined() ? found_inf.clone() : torch::Tensor();
    if (on_step) on_step(*this);
    auto skip = found_inf.defined() ? found_inf.ne(0) : torch::zeros({}, torch::kBool);
    for (auto& group : param_groups()) {
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto g = p.grad();
        if (grad_scale.defined()) {
          auto unscaled = (g.to(torch::kDouble) / grad_scale.to(torch::kDouble)).to(g.scalar_type());
          g.copy_(torch::where(skip, g, unscaled));
        }
        p.copy_(torch::where(skip, p, p - lr_ * g));
      }
    }
    step_count.add_(skip.logical_not().to(torch::kLong).reshape({}));
    return {};
  }

  int calls = 0;
  torch::Tensor seen_grad_scale;
  torch::Tensor seen_found_inf;
  torch::Tensor step_count = torch::zeros({}, torch::kLong);  // PyTorch's state["step"]
  std::function<void(AmpScalingSGD&)> on_step;

 private:
  double lr_;
};

double value_of(const torch::Tensor& t) { return t.to(torch::kDouble).item<double>(); }

}  // namespace

// test_grad_scaling_state_dict. `s1._init_growth_tracker = 7` is reproduced by loading s1's
// own state with "_growth_tracker" = 7 first.
TEST(PyTorchGradScalerTest, GradScalingStateDict) {
  for (bool lazy_init_scale : {true, false}) {
    SCOPED_TRACE(lazy_init_scale ? "lazy_init_scale=true" : "lazy_init_scale=false");
    mixprec::GradScaler s0(mixprec::GradScalerOptions()
                               .init_scale(3.)
                               .growth_factor(4.)
                               .backoff_factor(.5)
                               .growth_interval(2));
    mixprec::GradScaler s1(mixprec::GradScalerOptions()
                               .init_scale(6.)
                               .growth_factor(7.)
                               .backoff_factor(.8)
                               .growth_interval(1));
    auto sd = s1.state_dict();
    sd.insert_or_assign("_growth_tracker", static_cast<int64_t>(7));
    s1.load_state_dict(sd);
    ASSERT_EQ(s1.get_growth_tracker(), 7);

    if (lazy_init_scale) {
      // Dummy scale() call to ensure the scale tensor is lazily initialized.
      s1.scale(torch::full({1}, 4.0, torch::dtype(torch::kFloat)));
      auto scale = s1.get_scale_async();
      ASSERT_TRUE(scale.defined());
      EXPECT_EQ(scale.scalar_type(), torch::kFloat);
      EXPECT_EQ(scale.device(), torch::Device(torch::kCPU));
      ASSERT_EQ(s1.get_growth_tracker(), 7);
    }

    s1.load_state_dict(s0.state_dict());

    EXPECT_EQ(s1.get_scale(), 3.);
    EXPECT_EQ(s1.get_growth_factor(), 4.);
    EXPECT_EQ(s1.get_backoff_factor(), .5);
    EXPECT_EQ(s1.get_growth_interval(), 2);
    EXPECT_EQ(s1.get_growth_tracker(), 0);  // PyTorch: s1._init_growth_tracker == 0
  }
}

// test_pickle_gradscaler: C++ cannot pickle the scaler object, so its state_dict goes through
// torch::pickle_save / torch::pickle_load into a new scaler.
TEST(PyTorchGradScalerTest, PickleGradscaler) {
  for (bool lazy_init_scale : {true, false}) {
    SCOPED_TRACE(lazy_init_scale ? "lazy_init_scale=true" : "lazy_init_scale=false");
    mixprec::GradScaler a(mixprec::GradScalerOptions()
                              .init_scale(3.)
                              .growth_factor(4.)
                              .backoff_factor(.5)
                              .growth_interval(2));
    EXPECT_TRUE(a.is_enabled());  // CPU: always enabled
    if (lazy_init_scale) {
      a.scale(torch::tensor({4.0f}));
      ASSERT_TRUE(a.get_scale_async().defined());
      EXPECT_EQ(a.get_scale_async().device().type(), torch::kCPU);
    }

    std::vector<char> bytes = torch::pickle_save(c10::IValue(a.state_dict()));
    c10::IValue loaded = torch::pickle_load(bytes);
    ASSERT_TRUE(loaded.isGenericDict());
    EXPECT_EQ(loaded.toGenericDict().size(), 5u);
    mixprec::GradScaler b(mixprec::GradScalerOptions().enabled(a.is_enabled()));
    b.load_state_dict(loaded.toGenericDict());

    EXPECT_EQ(b.is_enabled(), a.is_enabled());
    EXPECT_EQ(b.get_scale(), 3.);
    EXPECT_EQ(b.get_growth_factor(), 4.);
    EXPECT_EQ(b.get_backoff_factor(), .5);
    EXPECT_EQ(b.get_growth_interval(), 2);
    EXPECT_EQ(b.get_growth_tracker(), 0);
    // PyTorch: b._per_optimizer_states["fdsa"] == _refresh_per_optimizer_state().
    torch::optim::SGD unseen({torch::zeros({1})}, torch::optim::SGDOptions(1.0));
    EXPECT_EQ(b.stage(unseen), mixprec::OptState::kReady);
    EXPECT_TRUE(b.found_inf_per_device(unseen).empty());

    if (lazy_init_scale) {
      EXPECT_EQ(b.scale(torch::tensor({4.0f})).item<float>(), 12.0f);
    }
  }
}

// test_grad_scaler_pass_itself, Optimizer2 (the attribute protocol): inside step() grad_scale
// and found_inf are defined tensors. Autocast(half) in PyTorch; fp32 here.
TEST(PyTorchGradScalerTest, GradScalerPassItself) {
  torch::manual_seed(mixprec_test::kScalingCaseSeed);
  auto x = torch::randn({4, 4});
  torch::nn::Linear m(4, 1);
  AmpScalingSGD o2(m->parameters(), 1.0);
  o2.on_step = [](AmpScalingSGD& o) {
    EXPECT_TRUE(o.grad_scale.defined());
    EXPECT_TRUE(o.found_inf.defined());
  };
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(2.0));
  auto loss = m->forward(x).mean();
  scaler.scale(loss).backward();
  scaler.step(o2);
  EXPECT_EQ(o2.calls, 1);
  ASSERT_TRUE(o2.seen_grad_scale.defined());
  EXPECT_EQ(value_of(o2.seen_grad_scale), 2.0);  // the scale times no preset
  ASSERT_TRUE(o2.seen_found_inf.defined());
  EXPECT_EQ(value_of(o2.seen_found_inf), 0.0);
  EXPECT_FALSE(o2.grad_scale.defined());  // cleared after step(), as Python deletes them
  EXPECT_FALSE(o2.found_inf.defined());
  EXPECT_NO_THROW(scaler.update());  // o2 recorded an inf check
}

// test_grad_scaler_with_preset_grad_scale, adapted to the CPU: the scale is the product of the
// scaler's scale and the optimizer's preset grad_scale.
TEST(PyTorchGradScalerTest, GradScalerWithPresetGradScale) {
  for (bool in_place_unscale : {false, true}) {
    SCOPED_TRACE(in_place_unscale ? "in_place_unscale=true" : "in_place_unscale=false");
    auto weight = torch::ones({5, 5}).requires_grad_();
    weight.mutable_grad() = torch::full_like(weight, 15);
    AmpScalingSGD opt({weight}, 0.1);
    mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(5));

    // Intentionally scale a CPU tensor, so the scale is lazily created there.
    scaler.scale(torch::ones({5}));

    if (in_place_unscale) {
      scaler.unscale_(opt);
      // The gradient should have been divided in place.
      EXPECT_TRUE(tensors_close(weight.grad(), torch::full_like(weight, 3), 1e-7, 1e-5));
    }

    // The user sets a grad_scale value that should be fused with the optimizer step.
    opt.grad_scale = torch::full({1}, 3.0);
    scaler.step(opt);
    EXPECT_EQ(opt.calls, 1);

    // Verify the gradient was correctly unscaled.
    EXPECT_TRUE(tensors_close(weight.grad(), torch::ones_like(weight), 1e-7, 1e-5));
  }
}

// TestShardGradScaler.test_grad_scaling, with the nested outputs [t1, (t0, t1), [t0, t1]]
// flattened (the C++ API scales a tensor or a vector of tensors).
TEST(PyTorchShardGradScalerTest, GradScaling) {
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(2.0));
  auto t0 = torch::full({1}, 4.0, torch::dtype(torch::kFloat));
  auto t1 = torch::full({1}, 8.0, torch::dtype(torch::kFloat));
  std::vector<torch::Tensor> outputs = {t1.clone(), t0.clone(), t1.clone(), t0.clone(), t1.clone()};
  auto scaled = scaler.scale(outputs);
  ASSERT_EQ(scaled.size(), 5u);
  const std::vector<float> expected = {16.0f, 8.0f, 16.0f, 8.0f, 16.0f};
  for (size_t i = 0; i < scaled.size(); ++i) EXPECT_EQ(scaled[i].item<float>(), expected[i]) << i;
  ASSERT_TRUE(scaler.get_scale_async().defined());
  EXPECT_EQ(scaler.get_scale_async().device(), torch::Device(torch::kCPU));
}

// test_fused_does_not_step_if_foundinf, adapted: here GradScaler's side of the contract. With
// an inf gradient, GradScaler must still call step() of a SupportsAmpScaling optimizer (no
// host-sync skip) and hand it found_inf == 1; the optimizer then leaves everything untouched.
TEST(PyTorchGradScalerTest, FusedDoesNotStepIfFoundinf) {
  const int num_tensors = 5;
  for (bool preset_grad_scale : {false, true}) {
    SCOPED_TRACE(preset_grad_scale ? "grad_scale=ones(1)" : "grad_scale=None");

    // The original's direct check, to show the helper optimizer honours the contract.
    {
      std::vector<torch::Tensor> params;
      for (int i = 0; i < num_tensors; ++i) {
        params.push_back(torch::ones({1}).requires_grad_());
        params.back().mutable_grad() = torch::ones({1});
      }
      AmpScalingSGD opt(params, 0.1);
      if (preset_grad_scale) opt.grad_scale = torch::ones({1});
      opt.found_inf = torch::ones({});
      opt.step();
      for (const auto& p : params) ASSERT_TRUE(torch::equal(p, torch::ones({1})));
      ASSERT_EQ(opt.step_count.item<int64_t>(), 0);
    }

    std::vector<torch::Tensor> params;
    for (int i = 0; i < num_tensors; ++i) {
      params.push_back(torch::ones({1}).requires_grad_());
      params.back().mutable_grad() = torch::ones({1});
    }
    // Two overflowing grads: found_inf must still be 1, not a count.
    params[1].grad().fill_(std::numeric_limits<float>::infinity());
    params[3].grad().fill_(std::numeric_limits<float>::infinity());
    AmpScalingSGD opt(params, 0.1);
    if (preset_grad_scale) opt.grad_scale = torch::ones({1});
    mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(4.0));
    scaler.scale(torch::ones({1}));  // creates the scale on the CPU

    scaler.step(opt);

    EXPECT_EQ(opt.calls, 1) << "GradScaler skipped the step itself instead of passing found_inf";
    ASSERT_TRUE(opt.seen_found_inf.defined());
    EXPECT_EQ(opt.seen_found_inf.scalar_type(), torch::kFloat);
    EXPECT_EQ(value_of(opt.seen_found_inf), 1.0);
    ASSERT_TRUE(opt.seen_grad_scale.defined());
    EXPECT_EQ(value_of(opt.seen_grad_scale), 4.0);  // 4 times the preset 1 (or none)
    for (int i = 0; i < num_tensors; ++i) {
      EXPECT_TRUE(torch::equal(params[i], torch::ones({1}))) << "param " << i;
    }
    EXPECT_EQ(opt.step_count.item<int64_t>(), 0);
    EXPECT_FALSE(opt.found_inf.defined());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 2.0);  // backoff 0.5
  }
}
