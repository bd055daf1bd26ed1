// Tests of the fused optimizers mixprec::optim::{SGD, Adam, AdamW}: the same trajectory as
// torch::optim on the same data, GradScaler's fused path against a control run, PyTorch's
// test_fused_does_not_step_if_foundinf (PyTorch's test/test_optim.py), and torch::save/torch::load
// round trips.
#include <gtest/gtest.h>
#include <mixprec/grad_scaler.h>
#include <mixprec/optim.h>
#include <torch/torch.h>

#include <limits>
#include <memory>
#include <sstream>
#include <typeinfo>
#include <string>
#include <vector>

#include "torch/test_util.h"

namespace {

using torch::Tensor;
using torch::optim::OptimizerParamGroup;

constexpr double kRtol = 1e-5;  // fp32: a few ulps per step, over a few steps
constexpr double kAtol = 1e-6;

// Parameters of several shapes: a transposed (non-contiguous but dense) one, and one large
// enough for the kernel to split it over threads.
std::vector<Tensor> make_params(torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(7);
  return {torch::randn({4, 3}, dtype), torch::randn({5}, dtype), torch::randn({6, 7}, dtype).t(),
          torch::randn({2, 3, 4}, dtype), torch::randn({300001}, dtype)};
}

std::vector<Tensor> clone_all(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.clone());  // clone() preserves the layout
  return out;
}

// The same fresh gradients for both runs (contiguous, times `scale`); at step 1 parameter 1 has
// none, so per-parameter step counts differ.
void set_grads(std::vector<Tensor>& a, std::vector<Tensor>& b, int step, double scale = 1.0) {
  torch::manual_seed(1000 + step);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Tensor g = torch::randn(a[i].sizes(), a[i].options()) * scale;
    a[i].mutable_grad() = step == 1 && i == 1 ? Tensor() : g.clone();
    b[i].mutable_grad() = step == 1 && i == 1 ? Tensor() : g.clone();
  }
}

// Two groups, the second with its own options.
template <typename Options>
std::vector<OptimizerParamGroup> two_groups(const std::vector<Tensor>& p, const Options& first,
                                            const Options& second) {
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{p[0], p[1], p[2]}, std::make_unique<Options>(first));
  groups.emplace_back(std::vector<Tensor>{p[3], p[4]}, std::make_unique<Options>(second));
  return groups;
}

// Every state value of `optimizer` for `params` as tensors, in a fixed order: step counts as
// int64 tensors, and the marker -1 for "no state" and -2 for "undefined tensor".
std::vector<Tensor> snapshot(torch::optim::Optimizer& optimizer,
                             const std::vector<Tensor>& params) {
  const auto copy = [](const Tensor& t) { return t.defined() ? t.clone() : torch::tensor(-2); };
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    const torch::optim::OptimizerParamState* state = find_state(optimizer, p);
    if (state == nullptr) {
      out.push_back(torch::tensor(-1));
    } else if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
      out.insert(out.end(), {torch::tensor(a->step()), copy(a->exp_avg()), copy(a->exp_avg_sq()),
                             copy(a->max_exp_avg_sq())});
    } else if (auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
      out.insert(out.end(), {torch::tensor(w->step()), copy(w->exp_avg()), copy(w->exp_avg_sq()),
                             copy(w->max_exp_avg_sq())});
    } else if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
      out.push_back(copy(s->momentum_buffer()));
    } else {
      ADD_FAILURE() << "unexpected state type";
    }
  }
  return out;
}

// Exact for integer entries (step counts, markers), allclose for floating ones; exact=true
// requires bit equality everywhere.
void expect_states(const std::vector<Tensor>& expected, const std::vector<Tensor>& actual,
                   bool exact, const std::string& where) {
  ASSERT_EQ(expected.size(), actual.size()) << where;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].scalar_type(), actual[i].scalar_type()) << where << " entry " << i;
    if (exact || !expected[i].is_floating_point()) {
      EXPECT_TRUE(torch::equal(expected[i], actual[i])) << where << " entry " << i;
    } else {
      EXPECT_TRUE(torch::allclose(actual[i], expected[i], kRtol, kAtol))
          << where << " entry " << i << ": max diff "
          << (actual[i] - expected[i]).abs().max().item<double>();
    }
  }
}

void expect_params_close(const std::vector<Tensor>& expected, const std::vector<Tensor>& actual,
                         const std::string& where, double rtol = kRtol, double atol = kAtol) {
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::allclose(actual[i], expected[i], rtol, atol))
        << where << " param " << i << ": max diff "
        << (actual[i] - expected[i]).abs().max().item<double>();
  }
}

// Runs the LibTorch optimizer and the fused one side by side on the same data.
template <typename Ref, typename Fused, typename Options>
void expect_same_trajectory(const Options& first, const Options& second,
                            torch::Dtype dtype = torch::kFloat, double rtol = kRtol,
                            double atol = kAtol) {
  std::vector<Tensor> ref_params = make_params(dtype);
  std::vector<Tensor> fused_params = clone_all(ref_params);
  Ref ref(two_groups(ref_params, first, second), first);
  Fused fused(two_groups(fused_params, first, second), first);
  for (int step = 0; step < 6; ++step) {
    set_grads(ref_params, fused_params, step);
    ref.step();
    fused.step();
    const std::string where = "step " + std::to_string(step);
    expect_params_close(ref_params, fused_params, where, rtol, atol);
    expect_states(snapshot(ref, ref_params), snapshot(fused, fused_params), false, where);
    for (std::size_t i = 0; i < ref_params.size(); ++i) {  // without a scale, grads are kept
      if (ref_params[i].grad().defined()) {
        EXPECT_TRUE(torch::equal(ref_params[i].grad(), fused_params[i].grad())) << where;
      }
    }
  }
}

using torch::optim::AdamOptions;
using torch::optim::AdamWOptions;
using torch::optim::SGDOptions;

}  // namespace

// ---- same trajectory as torch::optim ------------------------------------------------------

TEST(OptimSgdTest, MatchesLibTorchPlain) {
  expect_same_trajectory<torch::optim::SGD, mixprec::optim::SGD>(SGDOptions(0.1), SGDOptions(0.3));
}

TEST(OptimSgdTest, MatchesLibTorchMomentum) {
  expect_same_trajectory<torch::optim::SGD, mixprec::optim::SGD>(SGDOptions(0.1).momentum(0.9),
                                                                 SGDOptions(0.05).momentum(0.5));
}

TEST(OptimSgdTest, MatchesLibTorchDampening) {
  expect_same_trajectory<torch::optim::SGD, mixprec::optim::SGD>(
      SGDOptions(0.1).momentum(0.9).dampening(0.3), SGDOptions(0.1).momentum(0.7).dampening(0.9));
}

TEST(OptimSgdTest, MatchesLibTorchNesterov) {
  expect_same_trajectory<torch::optim::SGD, mixprec::optim::SGD>(
      SGDOptions(0.1).momentum(0.9).nesterov(true), SGDOptions(0.2).momentum(0.5).nesterov(true));
}

TEST(OptimSgdTest, MatchesLibTorchWeightDecay) {
  expect_same_trajectory<torch::optim::SGD, mixprec::optim::SGD>(
      SGDOptions(0.1).weight_decay(0.01),
      SGDOptions(0.1).weight_decay(0.1).momentum(0.9).nesterov(true));
}

TEST(OptimSgdTest, ReturnsTheClosureLoss) {
  Tensor w = torch::ones({3});
  w.mutable_grad() = torch::ones({3});
  mixprec::optim::SGD opt({w}, SGDOptions(0.5));
  const Tensor loss = opt.step([] { return torch::full({}, 3.0); });
  EXPECT_EQ(loss.item<double>(), 3.0);
  EXPECT_TRUE(torch::equal(w, torch::full({3}, 0.5)));
}

TEST(OptimAdamTest, MatchesLibTorchDefaults) {
  expect_same_trajectory<torch::optim::Adam, mixprec::optim::Adam>(AdamOptions(1e-2),
                                                                   AdamOptions(1e-3));
}

TEST(OptimAdamTest, MatchesLibTorchWeightDecayAndBetas) {
  expect_same_trajectory<torch::optim::Adam, mixprec::optim::Adam>(
      AdamOptions(1e-2).weight_decay(0.1),
      AdamOptions(3e-2).betas(std::make_tuple(0.8, 0.99)).eps(1e-6).weight_decay(0.01));
}

TEST(OptimAdamTest, MatchesLibTorchAmsgrad) {
  expect_same_trajectory<torch::optim::Adam, mixprec::optim::Adam>(
      AdamOptions(1e-2).amsgrad(true), AdamOptions(1e-2).amsgrad(true).weight_decay(0.1));
}

TEST(OptimAdamTest, MatchesLibTorchInFloat64) {
  expect_same_trajectory<torch::optim::Adam, mixprec::optim::Adam>(
      AdamOptions(1e-2).amsgrad(true), AdamOptions(1e-2).weight_decay(0.1), torch::kDouble, 1e-12,
      1e-14);
}

TEST(OptimAdamWTest, MatchesLibTorchDefaults) {
  expect_same_trajectory<torch::optim::AdamW, mixprec::optim::AdamW>(AdamWOptions(1e-2),
                                                                     AdamWOptions(1e-3));
}

TEST(OptimAdamWTest, MatchesLibTorchWeightDecay) {
  expect_same_trajectory<torch::optim::AdamW, mixprec::optim::AdamW>(
      AdamWOptions(1e-2).weight_decay(0.1), AdamWOptions(1e-2).weight_decay(0.0));
}

TEST(OptimAdamWTest, MatchesLibTorchAmsgrad) {
  expect_same_trajectory<torch::optim::AdamW, mixprec::optim::AdamW>(
      AdamWOptions(1e-2).amsgrad(true), AdamWOptions(3e-2).amsgrad(true).weight_decay(0.05));
}

TEST(OptimAdamWTest, RejectsInvalidOptionsAsLibTorch) {
  std::vector<Tensor> p{torch::ones({2})};
  EXPECT_THROW(mixprec::optim::AdamW(p, AdamWOptions(-1.0)), c10::Error);
  EXPECT_THROW(mixprec::optim::Adam(p, AdamOptions(1e-3).betas(std::make_tuple(1.0, 0.9))),
               c10::Error);
  EXPECT_THROW(mixprec::optim::SGD(p, SGDOptions(0.1).nesterov(true)), c10::Error);
}

// fp16/bf16 parameters, as PyTorch's fused optimizers take them: state in the parameter's dtype,
// math in float, every value rounded once when stored. So one step equals the fp32 step on the
// widened values, rounded, bit for bit (the kernel itself is checked over many steps, targets and
// special values in tests/core/fused_optim_simd_test.cpp); and a step GradScaler skips writes
// nothing.
template <typename Optimizer, typename Options>
void expect_16bit_step_is_the_rounded_fp32_step(torch::Dtype dtype, const Options& options) {
  const std::string where = std::string(c10::toString(dtype)) + " " + typeid(Optimizer).name();
  torch::manual_seed(5);
  Tensor w = torch::randn({1037}).to(dtype), w32 = w.to(torch::kFloat);
  const Tensor g = (torch::randn({1037}) * 1024).to(dtype);
  w.mutable_grad() = g.clone();
  w32.mutable_grad() = g.to(torch::kFloat);
  Optimizer ours(std::vector<Tensor>{w}, options), twin(std::vector<Tensor>{w32}, options);
  ours.grad_scale = torch::full({1}, 1024.0f);
  twin.grad_scale = torch::full({1}, 1024.0f);
  ours.step();
  twin.step();
  EXPECT_TRUE(torch::equal(w, w32.to(dtype))) << where << " param";
  EXPECT_TRUE(torch::equal(w.grad(), w32.grad().to(dtype))) << where << " grad (unscaled)";
  std::vector<Tensor> reference = snapshot(twin, {w32});
  for (Tensor& t : reference) t = t.is_floating_point() ? t.to(dtype) : t;
  expect_states(reference, snapshot(ours, {w}), /*exact=*/true, where + " state");

  mixprec::GradScaler scaler;
  w.mutable_grad() = g.clone();
  w.mutable_grad()[7] = std::numeric_limits<float>::infinity();
  const Tensor before = w.clone();
  const std::vector<Tensor> state_before = snapshot(ours, {w});
  scaler.scale(torch::ones({}));
  scaler.step(ours);
  scaler.update();
  EXPECT_TRUE(torch::equal(w, before)) << where << ": a skipped step wrote the parameter";
  expect_states(state_before, snapshot(ours, {w}), /*exact=*/true, where + " skipped step");
}

TEST(OptimAdamTest, RejectsSparseGradientsWithAClearMessage) {
  Tensor w = torch::ones({4});
  w.mutable_grad() = torch::ones({4}).to_sparse();
  mixprec::optim::Adam opt(std::vector<Tensor>{w});
  try {
    opt.step();
    ADD_FAILURE() << "expected an error for a sparse gradient";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not support sparse gradients"), std::string::npos)
        << e.what();
  }
}

TEST(OptimHalfTest, Float16AndBFloat16StepsAreRoundedFloat32Steps) {
  using namespace torch::optim;
  for (torch::Dtype dtype : {torch::kHalf, torch::kBFloat16}) {
    expect_16bit_step_is_the_rounded_fp32_step<mixprec::optim::SGD>(
        dtype, SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
    expect_16bit_step_is_the_rounded_fp32_step<mixprec::optim::Adam>(
        dtype, AdamOptions(1e-2).weight_decay(0.01).amsgrad(true));
    expect_16bit_step_is_the_rounded_fp32_step<mixprec::optim::AdamW>(
        dtype, AdamWOptions(1e-2).weight_decay(0.1));
  }
}

// ---- GradScaler drives the fused path --------------------------------------------------------

namespace {

// A scaler with growth_interval 1 over 6 steps with inf injected at steps 0 and 3, against a
// control run of the torch:: optimizer through the same kind of scaler (regular path).
template <typename Ref, typename Fused, typename Options>
void expect_scaler_matches_control(const Options& options, bool unscale_first) {
  std::vector<Tensor> ref_params = make_params();
  std::vector<Tensor> fused_params = clone_all(ref_params);
  Ref ref(ref_params, options);
  Fused fused(fused_params, options);
  const auto scaler_options = mixprec::GradScalerOptions().init_scale(1024.0).growth_interval(1);
  mixprec::GradScaler ref_scaler(scaler_options), fused_scaler(scaler_options);
  const Tensor loss = torch::ones({});
  for (int step = 0; step < 6; ++step) {
    const std::string where = "step " + std::to_string(step);
    ref_scaler.scale(loss);  // creates the scale on the CPU
    fused_scaler.scale(loss);
    ASSERT_EQ(ref_scaler.get_scale(), fused_scaler.get_scale()) << where;
    set_grads(ref_params, fused_params, step, fused_scaler.get_scale());
    const bool overflow = step == 0 || step == 3;
    if (overflow) {
      const double inf = std::numeric_limits<double>::infinity();
      ref_params[2].mutable_grad().view({-1})[5].fill_(inf);
      fused_params[2].mutable_grad().view({-1})[5].fill_(inf);
    }
    const std::vector<Tensor> params_before = clone_all(fused_params);
    const std::vector<Tensor> state_before = snapshot(fused, fused_params);
    std::vector<Tensor> grads_before;
    for (const Tensor& p : fused_params) {
      grads_before.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    }
    if (unscale_first) {
      ref_scaler.unscale_(ref);
      fused_scaler.unscale_(fused);
    }
    ref_scaler.step(ref);
    fused_scaler.step(fused);
    ref_scaler.update();
    fused_scaler.update();
    EXPECT_FALSE(fused.grad_scale.defined()) << where;  // GradScaler cleared them
    EXPECT_FALSE(fused.found_inf.defined()) << where;
    if (overflow) {  // the skipped step: nothing moved, also not the step counts
      for (std::size_t i = 0; i < fused_params.size(); ++i) {
        EXPECT_TRUE(torch::equal(fused_params[i], params_before[i])) << where << " param " << i;
        if (!unscale_first && grads_before[i].defined()) {
          EXPECT_TRUE(torch::equal(fused_params[i].grad(), grads_before[i])) << where;
        }
      }
      expect_states(state_before, snapshot(fused, fused_params), true, where);
    }
    for (std::size_t i = 0; i < fused_params.size(); ++i) {  // the fused kernel unscaled them
      if (!overflow && ref_params[i].grad().defined()) {
        EXPECT_TRUE(torch::equal(ref_params[i].grad(), fused_params[i].grad())) << where;
      }
    }
    expect_params_close(ref_params, fused_params, where);
    expect_states(snapshot(ref, ref_params), snapshot(fused, fused_params), false, where);
    EXPECT_EQ(ref_scaler.get_scale(), fused_scaler.get_scale()) << where;
  }
}

}  // namespace

TEST(OptimGradScalerTest, SgdSkipsOverflowAndMatchesControl) {
  expect_scaler_matches_control<torch::optim::SGD, mixprec::optim::SGD>(
      SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01), false);
}

TEST(OptimGradScalerTest, AdamSkipsOverflowAndMatchesControl) {
  expect_scaler_matches_control<torch::optim::Adam, mixprec::optim::Adam>(
      AdamOptions(1e-2).amsgrad(true).weight_decay(0.01), false);
}

TEST(OptimGradScalerTest, AdamWSkipsOverflowAndMatchesControl) {
  expect_scaler_matches_control<torch::optim::AdamW, mixprec::optim::AdamW>(
      AdamWOptions(1e-2).weight_decay(0.1), false);
}

TEST(OptimGradScalerTest, AdamWAfterExplicitUnscaleMatchesControl) {
  expect_scaler_matches_control<torch::optim::AdamW, mixprec::optim::AdamW>(
      AdamWOptions(1e-2).amsgrad(true), true);
}

// ---- PyTorch's test_fused_does_not_step_if_foundinf -----------------------------------------

namespace {

// 5 params of shape (1,) ones with grads ones; grad_scale undefined or ones; found_inf set:
// params and grads unchanged and no step counted. Then a clean step, and a skipped one after it
// (state exists now): step counts stay where they were.
template <typename Fused, typename Options>
void expect_no_step_if_found_inf(const Options& options, float found_inf) {
  for (const bool with_grad_scale : {false, true}) {
    std::vector<Tensor> params;
    for (int i = 0; i < 5; ++i) {
      params.push_back(torch::ones({1}));
      params.back().mutable_grad() = torch::ones({1});
    }
    Fused opt(params, options);
    opt.grad_scale = with_grad_scale ? torch::ones({1}) : Tensor();
    opt.found_inf = torch::full({}, found_inf);
    opt.step();
    for (const Tensor& p : params) {
      EXPECT_TRUE(torch::equal(p, torch::ones({1}))) << "grad_scale " << with_grad_scale;
      EXPECT_TRUE(torch::equal(p.grad(), torch::ones({1})));
    }
    EXPECT_TRUE(opt.state().empty()) << "a skipped first step creates no state (step count 0)";

    opt.found_inf = torch::zeros({});
    opt.step();
    const std::vector<Tensor> params_after_one = clone_all(params);
    const std::vector<Tensor> state_after_one = snapshot(opt, params);
    EXPECT_FALSE(torch::equal(params[0], torch::ones({1}))) << "found_inf 0 steps";
    opt.found_inf = torch::full({}, found_inf);
    opt.step();
    for (std::size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], params_after_one[i]));
    }
    expect_states(state_after_one, snapshot(opt, params), true, "second skipped step");
  }
}

}  // namespace

TEST(FusedOptimTest, SgdDoesNotStepIfFoundInf) {
  expect_no_step_if_found_inf<mixprec::optim::SGD>(SGDOptions(0.1).momentum(0.9), 1.0f);
}

TEST(FusedOptimTest, AdamDoesNotStepIfFoundInf) {
  expect_no_step_if_found_inf<mixprec::optim::Adam>(AdamOptions(0.1).amsgrad(true), 1.0f);
}

TEST(FusedOptimTest, AdamWDoesNotStepIfFoundInf) {
  expect_no_step_if_found_inf<mixprec::optim::AdamW>(AdamWOptions(0.1), 1.0f);
}

// See Note [found_inf is 0 or 1]: any non-zero value skips, not only 1 (PyTorch tests == 1).
TEST(FusedOptimTest, FoundInfTwoAlsoSkips) {
  expect_no_step_if_found_inf<mixprec::optim::SGD>(SGDOptions(0.1).momentum(0.9), 2.0f);
  expect_no_step_if_found_inf<mixprec::optim::Adam>(AdamOptions(0.1), 2.0f);
  expect_no_step_if_found_inf<mixprec::optim::AdamW>(AdamWOptions(0.1).amsgrad(true), 2.0f);
}

// grad_scale alone (found_inf undefined): grads are divided, written back, and the update is
// LibTorch's on the unscaled grads.
TEST(FusedOptimTest, UnscalesGradsWithGradScaleAndWritesThemBack) {
  std::vector<Tensor> ref_params = make_params();
  std::vector<Tensor> fused_params = clone_all(ref_params);
  torch::optim::AdamW ref(ref_params, AdamWOptions(1e-2));
  mixprec::optim::AdamW fused(fused_params, AdamWOptions(1e-2));
  set_grads(ref_params, fused_params, 0);
  for (Tensor& p : fused_params) p.mutable_grad().mul_(4096.0);
  fused.grad_scale = torch::full({}, 4096.0f);
  ref.step();
  fused.step();
  for (std::size_t i = 0; i < ref_params.size(); ++i) {
    EXPECT_TRUE(torch::equal(ref_params[i].grad(), fused_params[i].grad()));
  }
  expect_params_close(ref_params, fused_params, "grad_scale only");
}

// ---- serialization ---------------------------------------------------------------------------

namespace {

// Saves the fused optimizer after 3 steps, loads it into a fresh fused one and into the torch::
// one, and checks that all three continue identically.
template <typename Ref, typename Fused, typename Options>
void expect_save_load_round_trip(const Options& first, const Options& second) {
  std::vector<Tensor> params = make_params();
  Fused fused(two_groups(params, first, second), first);
  std::vector<Tensor> unused = clone_all(params);
  for (int step = 0; step < 3; ++step) {
    set_grads(params, unused, step);
    fused.step();
  }
  std::stringstream stream;
  torch::save(fused, stream);

  std::vector<Tensor> loaded_params = clone_all(params);
  std::vector<Tensor> ref_params = clone_all(params);
  Fused loaded(two_groups(loaded_params, first, second), first);
  Ref ref(two_groups(ref_params, first, second), first);
  stream.seekg(0);
  torch::load(loaded, stream);
  stream.seekg(0);
  torch::load(ref, stream);  // LibTorch's own optimizer reads the fused one's checkpoint
  expect_states(snapshot(fused, params), snapshot(loaded, loaded_params), true, "loaded");
  expect_states(snapshot(fused, params), snapshot(ref, ref_params), true, "loaded into torch::");

  for (int step = 3; step < 5; ++step) {
    set_grads(params, loaded_params, step);
    std::vector<Tensor> more = clone_all(params);
    set_grads(ref_params, more, step);
    fused.step();
    loaded.step();
    ref.step();
    const std::string where = "after load, step " + std::to_string(step);
    expect_params_close(params, loaded_params, where, 0.0, 0.0);
    expect_params_close(ref_params, loaded_params, where);
  }
}

}  // namespace

TEST(OptimSerializeTest, SgdSaveLoadRoundTrip) {
  expect_save_load_round_trip<torch::optim::SGD, mixprec::optim::SGD>(
      SGDOptions(0.1).momentum(0.9), SGDOptions(0.2).momentum(0.5).nesterov(true));
}

TEST(OptimSerializeTest, AdamSaveLoadRoundTrip) {
  expect_save_load_round_trip<torch::optim::Adam, mixprec::optim::Adam>(
      AdamOptions(1e-2).amsgrad(true), AdamOptions(1e-3).weight_decay(0.1));
}

TEST(OptimSerializeTest, AdamWSaveLoadRoundTrip) {
  expect_save_load_round_trip<torch::optim::AdamW, mixprec::optim::AdamW>(
      AdamWOptions(1e-2), AdamWOptions(1e-3).amsgrad(true));
}
