// GradScaler::unscale_grads_ (the gradient-list path, the C ABI's mixprec_grad_scaler_unscale_grads_)
// against unscale_ of a torch::optim::SGD over the same gradients: the same division, the same
// found_inf and the same scale sequence; and each gradient divided at most once per iteration,
// whichever path sees it first (Note [Gradient lists and optimizers]).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "mixprec/mixprec.h"
#include "torch/test_util.h"

namespace mixprec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr const char* kTwice = "unscaling it again would divide it twice";

// Gradients of several dtypes, as a scaled backward leaves them; `poison` puts inf (or NaN) into
// the second one.
std::vector<torch::Tensor> scaled_grads(int seed, float poison) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> grads = {torch::randn({5, 3}) * 512, torch::randn({7}) * 512,
                                      (torch::randn({4}) * 512).to(torch::kBFloat16),
                                      (torch::randn({2, 2}) * 512).to(torch::kDouble)};
  if (poison != 0.0f) grads[1][3] = poison;
  return grads;
}

std::vector<torch::Tensor> params_with(const std::vector<torch::Tensor>& grads) {
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& g : grads) {
    params.push_back(torch::zeros_like(g).requires_grad_());
    params.back().mutable_grad() = g.clone();
  }
  return params;
}

TEST(GradListsTest, AListIsUnscaledAndCountedAsAnOptimizersGradients) {
  GradScaler by_list(GradScalerOptions().init_scale(512.0).growth_interval(2));
  GradScaler by_optimizer(GradScalerOptions().init_scale(512.0).growth_interval(2));
  by_list.scale(torch::ones({1}));
  by_optimizer.scale(torch::ones({1}));
  const float poisons[] = {0, 0, kInf, 0, 0, 0, std::numeric_limits<float>::quiet_NaN(), 0, 0};
  for (int it = 0; it < 9; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    std::vector<torch::Tensor> grads = scaled_grads(it, poisons[it]);
    std::vector<torch::Tensor> params = params_with(grads);
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));

    const torch::Tensor found = by_list.unscale_grads_(grads);
    by_optimizer.unscale_(sgd);
    const auto expected = by_optimizer.found_inf_per_device(sgd);
    ASSERT_EQ(expected.size(), 1u);
    EXPECT_TRUE(torch::equal(found, expected[0].second));
    EXPECT_EQ(found.item<float>(), poisons[it] == 0.0f ? 0.0f : 1.0f);
    for (std::size_t i = 0; i < grads.size(); ++i) {
      // NaN != NaN: the NaN positions, then every other value.
      EXPECT_TRUE(torch::equal(torch::isnan(grads[i]), torch::isnan(params[i].grad())));
      EXPECT_TRUE(torch::equal(torch::nan_to_num(grads[i], 0.0), torch::nan_to_num(params[i].grad(), 0.0)))
          << "grad " << i;
    }
    by_list.update();
    by_optimizer.update();
    EXPECT_EQ(by_list.get_scale(), by_optimizer.get_scale());
    EXPECT_EQ(by_list.get_growth_tracker(), by_optimizer.get_growth_tracker());
  }
  EXPECT_NE(by_list.get_scale(), 512.0);  // the run grew and backed off
}

TEST(GradListsTest, AGradientIsNeverDividedTwiceInOneIteration) {
  GradScaler scaler(GradScalerOptions().init_scale(4.0));
  scaler.scale(torch::ones({1}));
  std::vector<torch::Tensor> grads = scaled_grads(1, 0.0f);
  std::vector<torch::Tensor> params = params_with(grads);
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = params[i].grad();  // the same grads
  const std::vector<torch::Tensor> before = {grads[0].clone(), grads[1].clone()};
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  optim::SGD fused(params, torch::optim::SGDOptions(0.1));

  scaler.unscale_grads_({grads[0]});
  EXPECT_THROW_WITH(scaler.unscale_grads_({grads[0]}), kTwice);
  EXPECT_THROW_WITH(scaler.unscale_grads_({grads[1], grads[1]}), kTwice);
  EXPECT_THROW_WITH(scaler.unscale_(sgd), "already unscaled by unscale_grads_()");
  EXPECT_THROW_WITH(scaler.step(sgd), "already unscaled by unscale_grads_()");
  EXPECT_THROW_WITH(scaler.step(fused), "already unscaled by unscale_grads_()");
  EXPECT_TRUE(torch::equal(grads[0], before[0] / 4));  // divided once
  EXPECT_TRUE(torch::equal(grads[1], before[1]));      // refused before any division
  scaler.update();

  // A new iteration: the optimizer first, then a list over its gradients.
  scaler.unscale_(sgd);
  EXPECT_THROW_WITH(scaler.unscale_grads_({grads[1]}), kTwice);
  scaler.update();
  scaler.step(fused);  // the fused kernel unscales them
  EXPECT_THROW_WITH(scaler.unscale_grads_({grads[2]}), kTwice);
  scaler.update();
  EXPECT_NO_THROW(scaler.unscale_grads_(grads));  // each once per iteration
}

TEST(GradListsTest, AListThatThrowsLeavesNoCheckForUpdate) {
  GradScaler scaler;
  scaler.scale(torch::ones({1}));
  EXPECT_THROW_WITH(scaler.unscale_grads_({torch::ones({2}), torch::ones({2}, torch::kHalf)}),
                    "Attempting to unscale FP16 gradients.");
  EXPECT_THROW_WITH(scaler.update(), "No inf checks were recorded prior to update.");
}

TEST(GradListsTest, TheFoundInfReturnedIsACopy) {
  GradScaler scaler;
  scaler.scale(torch::ones({1}));
  torch::Tensor found = scaler.unscale_grads_({torch::full({2}, kInf)});
  found.zero_();  // a caller's write does not reach the scaler's decision
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

}  // namespace
}  // namespace mixprec
