// Differential tests of the fused optimizers against PyTorch's own fused CPU kernels (LibTorch
// >= 2.4): mixprec::optim::SGD / Adam / AdamW against at::_fused_sgd_ / _fused_adam_ /
// _fused_adamw_, driven as Python's torch.optim.{SGD, Adam, AdamW}(fused=True) drive them (state
// steps as float tensors, incremented before the kernel and decremented by found_inf after it;
// SGD's is_first_step while no momentum buffer exists), with grad_scale, with found_inf 0 and 1,
// in float32, float64, float16 and bfloat16, over every option both support (maximize: mixprec follows
// torch::optim, which has none).
//
// Tolerance: both sides compute the same formulas in a different order (the grouping of the bias
// corrections, the step size and the decay terms), so results differ by a few ulps of the
// operands per step. The operands here are O(1) (randn parameters and unscaled gradients), and
// an element that ends near 0 by cancellation keeps an absolute error of a few ulps of them: the
// largest seen on LibTorch 2.6 was 1.1e-6 (9 ulps at 1.3; Adam, lr 0.1, after 4 steps). Hence
// rtol 1e-5 with atol 2e-6 in float32, rtol 1e-12 with atol 1e-13 in float64, over 6 steps
// (16-bit types: Note [16-bit optimizer differentials]). A step with found_inf = 1 must leave parameters, gradients,
// moments and step counts exactly as they were, on both sides.
#include <gtest/gtest.h>
#include <mixprec/mixprec.h>
#include <mixprec/optim.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <string>
#include <vector>

#include "torch/test_util.h"

namespace {

using torch::Tensor;

constexpr double kGradScale = 1024;
constexpr int kSteps = 6;
constexpr int kSkippedStep = 3;  // found_inf = 1 on this step (1-based)

struct Tolerance {
  double rtol, atol;
};
// fp32/fp64: see the file comment. fp16/bf16: see expect_close_16.
Tolerance tolerance(torch::Dtype dtype) {
  if (dtype == torch::kDouble) return {1e-12, 1e-13};
  return {1e-5, 2e-6};
}
const torch::Dtype kDTypes[] = {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16};

bool is_16_bit(torch::Dtype dtype) { return dtype == torch::kHalf || dtype == torch::kBFloat16; }
// The distance from 1 to the next larger value of a 16-bit type.
double eps_16(torch::Dtype dtype) { return dtype == torch::kHalf ? 1.0 / 1024 : 1.0 / 128; }

// Fails naming the element furthest outside |a - b| <= tol (tensors of doubles).
void expect_within(const Tensor& a, const Tensor& b, const Tensor& tol, const std::string& where,
                   const std::string& what) {
  const Tensor excess = ((a - b).abs() - tol).view({-1});
  if (!(excess > 0).any().item<bool>()) return;
  const std::int64_t i = excess.argmax().item<std::int64_t>();
  ADD_FAILURE() << where << ": element " << i << " is " << a.view({-1})[i].item<double>()
                << ", PyTorch's " << b.view({-1})[i].item<double>() << " (" << what
                << " allows " << tol.view({-1})[i].item<double>() << ")";
}

// A tolerance that a kernel doing nothing would pass says nothing: at least a quarter of the
// reference's elements must lie outside it. Guards the magnitudes make_params/make_grads chose.
void expect_meaningful(const Tensor& reference, const Tensor& tol, const std::string& where) {
  const double outside = (reference.abs() > tol).to(torch::kDouble).mean().item<double>();
  EXPECT_GE(outside, 0.25) << where << ": only " << outside * 100
                           << "% of the reference's elements exceed the tolerance, so leaving "
                              "them untouched would pass; choose larger magnitudes";
}

// Note [16-bit optimizer differentials]
// fp16/bf16 parameters and state compute in float and round once per store on both sides;
// PyTorch's exp_avg update is a lerp with FMA and its SGD uses FMA, ours separate products and
// sums, so the floats may differ in their last bit and round to neighbouring 16-bit values, and
// later steps carry that on. An element that ends small by cancellation keeps an error of its
// operands' ulps, and its operands were as large as the tensor's elements (seen: exp_avg 3.5e-4
// against PyTorch's 4.6e-4 in fp16, half an ulp of 0.3). So: two ulps relative plus two ulps of
// the tensor's largest element. An absolute tolerance of two ulps at 1 (this file's first
// version) let a kernel that did nothing pass: the updates and exp_avg_sq were below it. Each
// tolerance is now checked to be meaningful, and the parameters are also compared by what each
// step changed (expect_step_close).
void expect_close_16(const Tensor& ours, const Tensor& theirs, torch::Dtype dtype,
                     const std::string& where) {
  ASSERT_TRUE(ours.defined()) << where << ": mixprec has no such tensor";
  const Tensor a = ours.to(torch::kDouble), b = theirs.to(torch::kDouble);
  const double eps = eps_16(dtype);
  const Tensor tol = 2 * eps * b.abs() + 2 * eps * b.abs().max();
  expect_within(a, b, tol, where, "two ulps, and two of the largest element,");
  expect_meaningful(b, tol, where);
}

void expect_close(const Tensor& ours, const Tensor& theirs, torch::Dtype dtype,
                  const std::string& where) {
  if (is_16_bit(dtype)) return expect_close_16(ours, theirs, dtype, where);
  ASSERT_TRUE(ours.defined()) << where << ": mixprec has no such tensor";
  const Tolerance t = tolerance(dtype);
  if (torch::allclose(ours, theirs, t.rtol, t.atol)) return;
  // The element furthest outside the tolerance, in double.
  const Tensor a = ours.to(torch::kDouble).view({-1}), b = theirs.to(torch::kDouble).view({-1});
  const Tensor excess = (a - b).abs() - t.rtol * b.abs();
  const std::int64_t i = excess.argmax().item<std::int64_t>();
  ADD_FAILURE() << where << ": element " << i << " is " << a[i].item<double>() << ", PyTorch's "
                << b[i].item<double>() << " (rtol " << t.rtol << ", atol " << t.atol << ")";
}

// 16-bit parameters: what one step changed on each side, (after - before), agrees to four ulps of
// the change, two of the value (its rounding on store) and two of the largest change (a change
// that ends small is made from 16-bit state, a momentum buffer or exp_avg, that ended small by
// cancellation: seen in fp16, Adam -9.78e-6 against PyTorch's -9.60e-6 at step 6, where the
// typical change is 1e-3); and the change is large enough against that tolerance for a step that
// did nothing to fail. fp32/fp64: values are compared.
void expect_step_close(const Tensor& before_ours, const Tensor& ours, const Tensor& before_theirs,
                       const Tensor& theirs, torch::Dtype dtype, const std::string& where) {
  if (!is_16_bit(dtype)) return;
  const Tensor change_ours = ours.to(torch::kDouble) - before_ours.to(torch::kDouble);
  const Tensor change_theirs = theirs.to(torch::kDouble) - before_theirs.to(torch::kDouble);
  const double eps = eps_16(dtype);
  const Tensor magnitude = torch::maximum(theirs.to(torch::kDouble).abs(),
                                          before_theirs.to(torch::kDouble).abs());
  const Tensor tol = 4 * eps * change_theirs.abs() + 2 * eps * magnitude +
                     2 * eps * change_theirs.abs().max();
  expect_within(change_ours, change_theirs, tol, where + " change",
                "four ulps of the change, two of the value and two of the largest change,");
  expect_meaningful(change_theirs, tol, where + " change");
}

// The unscaled grads: multiplying by 1/1024 is exact, so they agree bit for bit in every dtype.
void expect_same(const Tensor& ours, const Tensor& theirs, const std::string& where) {
  ASSERT_TRUE(ours.defined()) << where << ": mixprec has no such tensor";
  if (torch::equal(ours, theirs)) return;
  const Tensor differ = (ours != theirs).view({-1});
  const std::int64_t i = differ.to(torch::kInt).argmax().item<std::int64_t>();
  ADD_FAILURE() << where << ": element " << i << " is "
                << ours.view({-1})[i].item<double>() << ", PyTorch's "
                << theirs.view({-1})[i].item<double>() << " (exact)";
}

std::vector<Tensor> make_params(torch::Dtype dtype) {
  torch::manual_seed(11);
  // Sizes below, at and above SIMD widths, and one the kernels split over threads. 16-bit
  // parameters are 1/64 of those, so one step moves them by many of their ulps (Note [16-bit
  // optimizer differentials]): an Adam step of lr 1e-3 is 16 bf16 ulps at 1/64, 1/8 of one at 1.
  const double size = is_16_bit(dtype) ? 1.0 / 64 : 1.0;
  return {torch::randn({4, 3}, dtype) * size, torch::randn({5}, dtype) * size,
          torch::randn({33}, dtype) * size, torch::randn({100003}, dtype) * size};
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}
std::vector<Tensor> zeros_like(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(torch::zeros_like(t));
  return out;
}

// The scaled gradients of step `step` (the same on both sides).
std::vector<Tensor> make_grads(const std::vector<Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(torch::randn_like(p) * kGradScale);
  return out;
}

// Gives `optimizer` the grads, GradScaler's two tensors, and steps it.
void step_ours(torch::optim::Optimizer& optimizer, mixprec::SupportsAmpScaling& amp,
               const std::vector<Tensor>& params, const std::vector<Tensor>& grads, float found) {
  for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i].clone();
  amp.grad_scale = torch::full({1}, kGradScale);
  amp.found_inf = torch::full({1}, found);
  optimizer.step();
  amp.grad_scale = Tensor();
  amp.found_inf = Tensor();
}

float found_inf_at(int step) { return step == kSkippedStep ? 1.0f : 0.0f; }

struct AdamCase {
  double lr, beta1, beta2, weight_decay, eps;
  bool amsgrad;
};
const std::vector<AdamCase> kAdamCases = {
    {1e-3, 0.9, 0.999, 0.0, 1e-8, false},
    {1e-2, 0.8, 0.99, 0.1, 1e-6, false},
    {5e-3, 0.9, 0.999, 0.01, 1e-8, true},
    {1e-1, 0.0, 0.5, 0.3, 1e-3, true},
};

// Adam (decoupled = false, L2 decay) or AdamW (decoupled = true) against PyTorch's kernel.
void compare_adam(bool decoupled, torch::Dtype dtype, const AdamCase& c) {
  const std::string name = std::string(decoupled ? "AdamW" : "Adam") + " " +
                           c10::toString(dtype) + " lr " + std::to_string(c.lr) + " betas (" +
                           std::to_string(c.beta1) + ", " + std::to_string(c.beta2) + ") wd " +
                           std::to_string(c.weight_decay) + " eps " + std::to_string(c.eps) +
                           (c.amsgrad ? " amsgrad" : "");
  std::vector<Tensor> ours = make_params(dtype);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  mixprec::SupportsAmpScaling* amp = nullptr;
  if (decoupled) {
    auto o = std::make_unique<mixprec::optim::AdamW>(
        ours, torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).weight_decay(
                  c.weight_decay).eps(c.eps).amsgrad(c.amsgrad));
    amp = o.get();
    optimizer = std::move(o);
  } else {
    auto o = std::make_unique<mixprec::optim::Adam>(
        ours, torch::optim::AdamOptions(c.lr).betas({c.beta1, c.beta2}).weight_decay(
                  c.weight_decay).eps(c.eps).amsgrad(c.amsgrad));
    amp = o.get();
    optimizer = std::move(o);
  }
  std::vector<Tensor> theirs = make_params(dtype);
  std::vector<Tensor> exp_avgs = zeros_like(theirs), exp_avg_sqs = zeros_like(theirs);
  std::vector<Tensor> max_sqs = c.amsgrad ? zeros_like(theirs) : std::vector<Tensor>{};
  std::vector<Tensor> steps;
  for (std::size_t i = 0; i < theirs.size(); ++i) steps.push_back(torch::zeros({}));

  for (int step = 1; step <= kSteps; ++step) {
    const std::vector<Tensor> grads = make_grads(theirs, step);
    const float found = found_inf_at(step);
    const std::vector<Tensor> before_ours = clones(ours), before_theirs = clones(theirs);
    step_ours(*optimizer, *amp, ours, grads, found);
    std::vector<Tensor> their_grads = clones(grads);
#if MIXPREC_TORCH_CPU_AMP_KERNELS
    const Tensor grad_scale = torch::full({1}, kGradScale), found_inf = torch::full({1}, found);
    for (Tensor& s : steps) s.add_(1);
    if (decoupled) {
      at::_fused_adamw_(theirs, their_grads, exp_avgs, exp_avg_sqs, max_sqs, steps, c.lr, c.beta1,
                        c.beta2, c.weight_decay, c.eps, c.amsgrad, /*maximize=*/false, grad_scale,
                        found_inf);
    } else {
      at::_fused_adam_(theirs, their_grads, exp_avgs, exp_avg_sqs, max_sqs, steps, c.lr, c.beta1,
                       c.beta2, c.weight_decay, c.eps, c.amsgrad, /*maximize=*/false, grad_scale,
                       found_inf);
    }
    for (Tensor& s : steps) s.sub_(found_inf.squeeze());
#endif
    for (std::size_t i = 0; i < ours.size(); ++i) {
      const std::string where = name + ", step " + std::to_string(step) + ", param " +
                                std::to_string(i);
      expect_close(ours[i], theirs[i], dtype, where + " value");
      if (found == 0) {
        expect_step_close(before_ours[i], ours[i], before_theirs[i], theirs[i], dtype, where);
      }
      expect_same(ours[i].grad(), their_grads[i], where + " grad (unscaled in place)");
      const auto* state = find_state(*optimizer, ours[i]);
      ASSERT_NE(state, nullptr) << where << ": no state";
      Tensor m, v, vmax;
      std::int64_t count = 0;
      if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
        m = a->exp_avg(), v = a->exp_avg_sq(), vmax = a->max_exp_avg_sq(), count = a->step();
      } else if (const auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
        m = w->exp_avg(), v = w->exp_avg_sq(), vmax = w->max_exp_avg_sq(), count = w->step();
      }
      EXPECT_EQ(count, static_cast<std::int64_t>(steps[i].item<float>())) << where << " step";
      expect_close(m, exp_avgs[i], dtype, where + " exp_avg");
      expect_close(v, exp_avg_sqs[i], dtype, where + " exp_avg_sq");
      if (c.amsgrad) expect_close(vmax, max_sqs[i], dtype, where + " max_exp_avg_sq");
    }
    if (::testing::Test::HasFailure()) return;
  }
}

#define SKIP_WITHOUT_PYTORCH_CPU_AMP()                                                          \
  if (!MIXPREC_TORCH_CPU_AMP_KERNELS) {                                                         \
    GTEST_SKIP()                                                                                \
        << "PyTorch's fused CPU optimizer kernels need LibTorch >= 2.4; this is " TORCH_VERSION \
           " (the Debian 13 stage of scripts/test.sh runs these)";                              \
  }

TEST(PyTorchReferenceOptimTest, AdamMatchesFusedAdam) {
  SKIP_WITHOUT_PYTORCH_CPU_AMP();
  for (torch::Dtype dtype : kDTypes) {
    for (const AdamCase& c : kAdamCases) compare_adam(false, dtype, c);
  }
}

TEST(PyTorchReferenceOptimTest, AdamWMatchesFusedAdamW) {
  SKIP_WITHOUT_PYTORCH_CPU_AMP();
  for (torch::Dtype dtype : kDTypes) {
    for (const AdamCase& c : kAdamCases) compare_adam(true, dtype, c);
  }
}

struct SgdCase {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

TEST(PyTorchReferenceOptimTest, SgdMatchesFusedSgd) {
  SKIP_WITHOUT_PYTORCH_CPU_AMP();
  const std::vector<SgdCase> cases = {
      {0.1, 0.0, 0.0, 0.0, false}, {0.05, 0.9, 0.0, 0.0, false}, {0.05, 0.9, 0.1, 0.0, false},
      {0.02, 0.9, 0.0, 0.01, true}, {0.3, 0.5, 0.5, 0.2, false},
  };
  for (torch::Dtype dtype : kDTypes) {
    for (const SgdCase& c : cases) {
      const std::string name = std::string("SGD ") + c10::toString(dtype) + " lr " +
                               std::to_string(c.lr) + " momentum " + std::to_string(c.momentum) +
                               " dampening " + std::to_string(c.dampening) + " wd " +
                               std::to_string(c.weight_decay) + (c.nesterov ? " nesterov" : "");
      std::vector<Tensor> ours = make_params(dtype);
      mixprec::optim::SGD optimizer(ours, torch::optim::SGDOptions(c.lr)
                                              .momentum(c.momentum)
                                              .dampening(c.dampening)
                                              .weight_decay(c.weight_decay)
                                              .nesterov(c.nesterov));
      std::vector<Tensor> theirs = make_params(dtype);
      // Python's _fused_sgd: empty buffers on the first step (the kernel fills them), none
      // without momentum.
      std::vector<Tensor> buffers =
          c.momentum != 0 ? zeros_like(theirs) : std::vector<Tensor>{};
      [[maybe_unused]] bool first_step = c.momentum != 0;  // read by PyTorch's kernel only
      for (int step = 1; step <= kSteps; ++step) {
        const std::vector<Tensor> grads = make_grads(theirs, step);
        const float found = found_inf_at(step);
        const std::vector<Tensor> before_ours = clones(ours), before_theirs = clones(theirs);
        step_ours(optimizer, optimizer, ours, grads, found);
        std::vector<Tensor> their_grads = clones(grads);
#if MIXPREC_TORCH_CPU_AMP_KERNELS
        // PyTorch 2.6's fused SGD leaves every whole vector of an fp16/bf16 parameter unchanged
        // (pytorch/pytorch#191763, fixed after 2.6 by #192545). For those dtypes the reference
        // is its float32 kernel on the widened values, each result rounded to the dtype: what a
        // 16-bit fused step computes.
        const bool widen = dtype == torch::kHalf || dtype == torch::kBFloat16;
        const auto wide = [&](const std::vector<Tensor>& ts) {
          std::vector<Tensor> out;
          for (const Tensor& t : ts) out.push_back(widen ? t.to(torch::kFloat) : t);
          return out;
        };
        std::vector<Tensor> w = wide(theirs), g = wide(their_grads), b = wide(buffers);
        at::_fused_sgd_(w, g, b, c.weight_decay, c.momentum, c.lr, c.dampening, c.nesterov,
                        /*maximize=*/false, first_step, torch::full({1}, kGradScale),
                        torch::full({1}, found));
        for (std::size_t i = 0; widen && i < w.size(); ++i) {
          theirs[i].copy_(w[i]);
          their_grads[i].copy_(g[i]);
          if (!b.empty()) buffers[i].copy_(b[i]);
        }
#endif
        // found_inf is 0 on step 1 here, so the first step always fills the buffers.
        first_step = false;
        for (std::size_t i = 0; i < ours.size(); ++i) {
          const std::string where = name + ", step " + std::to_string(step) + ", param " +
                                    std::to_string(i);
          expect_close(ours[i], theirs[i], dtype, where + " value");
          if (found == 0) {
            expect_step_close(before_ours[i], ours[i], before_theirs[i], theirs[i], dtype, where);
          }
          expect_same(ours[i].grad(), their_grads[i], where + " grad (unscaled in place)");
          if (c.momentum == 0) continue;
          const auto* state =
              dynamic_cast<const torch::optim::SGDParamState*>(find_state(optimizer, ours[i]));
          ASSERT_NE(state, nullptr) << where << ": no momentum buffer";
          expect_close(state->momentum_buffer(), buffers[i], dtype, where + " momentum buffer");
        }
        if (HasFailure()) return;
      }
    }
  }
}

}  // namespace
