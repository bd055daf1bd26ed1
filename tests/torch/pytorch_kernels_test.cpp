// PyTorch's own tests of the two AMP kernels and of GradScaler._unscale_grads_, ported to
// mixprec's functional API (spec/pytorch-gradscaler.md §6.1, tests 1, 2, 3, 8 and 24), CPU only,
// with PyTorch's numbers and tolerances.
#include <gtest/gtest.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "scaling_case.h"

namespace {

using mixprec_test::found_inf_on;
using mixprec_test::tensors_close;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// One case of test_grad_scaling_unscale: a list of grads and whether found_inf must end up 1.
struct UnscaleCase {
  std::string name;
  std::vector<torch::Tensor> grads;
  bool expect_inf;
};

// The 1-element value of `t` as a double.
double value_of(const torch::Tensor& t) { return t.to(torch::kDouble).item<double>(); }

void run_grad_scaling_unscale(torch::Dtype dtype) {
  auto inv_scale = torch::full({1}, 0.25, torch::dtype(torch::kFloat));
  auto found_inf = torch::full({1}, 0.0, torch::dtype(torch::kFloat));

  const int64_t size = 20;
  auto g = torch::full({size, size}, 4.0, torch::dtype(dtype));
  auto ginf = g.clone();
  ginf.index_put_({2, 2}, kInf);
  auto gnan = g.clone();
  gnan.index_put_({2, 2}, kNan);

  using torch::indexing::Slice;
  auto cols5 = [](const torch::Tensor& t) { return t.clone().index({Slice(), Slice(0, 5)}); };
  // Every element is a fresh clone, as in PyTorch.
  std::vector<UnscaleCase> cases = {
      {"[g, g]", {g.clone(), g.clone()}, false},
      {"[g, g.t()]", {g.clone(), g.clone().t()}, false},
      {"[g, g[:, :5]]", {g.clone(), cols5(g)}, false},
      {"[g[:, :5], g[:, :5]]", {cols5(g), cols5(g)}, false},
      {"[g, ginf]", {g.clone(), ginf.clone()}, true},
      {"[g, gnan]", {g.clone(), gnan.clone()}, true},
      {"[g, ginf[:, :5]]", {g.clone(), cols5(ginf)}, true},
      {"[g, gnan[:, :5]]", {g.clone(), cols5(gnan)}, true},
      {"[ginf, g[:, :5]]", {ginf.clone(), cols5(g)}, true},
      {"[ginf[:, :5], g[:, :5]]", {cols5(ginf), cols5(g)}, true},
  };

  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    found_inf.zero_();
    mixprec::non_finite_check_and_unscale_(c.grads, found_inf, inv_scale);
    if (c.expect_inf) {
      EXPECT_EQ(value_of(found_inf), 1.0);
    } else {
      EXPECT_EQ(value_of(found_inf), 0.0);
      for (const auto& grad : c.grads) {
        EXPECT_TRUE(tensors_close(grad, torch::ones_like(grad), 1e-7, 1e-5));
      }
    }
  }

  // When passing lists with mismatched dtypes to a raw ampUnscale_ call, it must not raise.
  std::vector<torch::Tensor> grads = {g.clone(), g.to(torch::kHalf)};
  found_inf.zero_();
  mixprec::non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  EXPECT_EQ(value_of(found_inf), 0.0);
  for (const auto& grad : grads) {
    EXPECT_TRUE(tensors_close(grad, torch::ones_like(grad), 1e-7, 1e-5));
  }

  // The "perfect storm": GradScaler's gradient walk over a dense, a non-dense and two fp16 grads
  // (the cuda:1 half of PyTorch's storm needs two GPUs).
  std::vector<torch::Tensor> storm = {g, cols5(g), g.to(torch::kHalf), g.to(torch::kHalf)};
  std::vector<torch::Tensor> dummies;
  for (const auto& grad : storm) {
    dummies.push_back(torch::empty(grad.sizes(), grad.options()).requires_grad_());
  }
  torch::optim::SGD opt(dummies, torch::optim::SGDOptions(1.0));

  for (int inject_inf = -1; inject_inf < static_cast<int>(dummies.size()); ++inject_inf) {
    SCOPED_TRACE("inject_inf=" + std::to_string(inject_inf));
    found_inf = torch::full({1}, 0.0, torch::dtype(torch::kFloat));
    std::vector<torch::Tensor> grads_now;
    for (const auto& grad : storm) grads_now.push_back(grad.clone(torch::MemoryFormat::Preserve));
    // The non-dense member must stay a view of a larger tensor.
    grads_now[1] = cols5(g);
    if (inject_inf >= 0) grads_now[inject_inf].index_put_({2, 2}, kInf);
    for (size_t i = 0; i < dummies.size(); ++i) dummies[i].mutable_grad() = grads_now[i];

    auto fipd = mixprec::unscale_grads_(opt, inv_scale, found_inf, /*allow_fp16=*/true);
    double sum = 0.0;
    for (const auto& entry : fipd) sum += value_of(entry.second);
    if (inject_inf < 0) {
      ASSERT_FALSE(fipd.empty());
      EXPECT_EQ(sum, 0.0);
      for (const auto& grad : grads_now) {
        EXPECT_TRUE(tensors_close(grad, torch::ones_like(grad), 1e-7, 1e-5));
      }
    } else {
      EXPECT_EQ(sum, 1.0);
    }
  }
}

}  // namespace

// test_grad_scaling_unscale (float32)
TEST(PyTorchGradScalerTest, GradScalingUnscaleFloat32) { run_grad_scaling_unscale(torch::kFloat); }

// test_grad_scaling_unscale (float64)
TEST(PyTorchGradScalerTest, GradScalingUnscaleFloat64) { run_grad_scaling_unscale(torch::kDouble); }

// test_grad_scaling_update_scale
TEST(PyTorchGradScalerTest, GradScalingUpdateScale) {
  const double growth = 2.0;
  const double backoff = 0.25;
  const int64_t growth_interval = 2;
  auto scale = torch::full({1}, 4.0, torch::dtype(torch::kFloat));
  auto growth_tracker = torch::full({1}, 0, torch::dtype(torch::kInt));
  auto found_inf = torch::full({1}, 0.0, torch::dtype(torch::kFloat));

  // Simulates 2 consecutive unskipped iterations.
  mixprec::update_scale_(scale, growth_tracker, found_inf, growth, backoff, growth_interval);
  EXPECT_EQ(growth_tracker.item<int>(), 1);
  EXPECT_EQ(scale.item<float>(), 4.0f);
  mixprec::update_scale_(scale, growth_tracker, found_inf, growth, backoff, growth_interval);
  EXPECT_EQ(growth_tracker.item<int>(), 0);
  EXPECT_EQ(scale.item<float>(), 8.0f);

  // Simulates a skipped iteration.
  found_inf.fill_(1.0);
  mixprec::update_scale_(scale, growth_tracker, found_inf, growth, backoff, growth_interval);
  EXPECT_EQ(growth_tracker.item<int>(), 0);
  EXPECT_EQ(scale.item<float>(), 2.0f);
}

namespace {

torch::Tensor sparse(const std::vector<std::vector<int64_t>>& idx, const std::vector<double>& v,
                     torch::Dtype dtype) {
  auto i = torch::tensor({idx[0][0], idx[0][1], idx[0][2], idx[1][0], idx[1][1], idx[1][2]},
                         torch::dtype(torch::kLong))
               .view({2, 3});
  auto values = torch::tensor(v, torch::dtype(torch::kDouble)).to(dtype);
  return torch::sparse_coo_tensor(i, values, {2, 3}, torch::dtype(dtype));
}

// `_unscale_grads_(opt, inv_scale, found_inf.zero_(), allow_fp16)[cur]`.
torch::Tensor unscale_and_get(torch::optim::Optimizer& opt, const torch::Tensor& inv_scale,
                              torch::Tensor& found_inf, bool allow_fp16) {
  found_inf.zero_();
  auto fipd = mixprec::unscale_grads_(opt, inv_scale, found_inf, allow_fp16);
  return found_inf_on(fipd, found_inf.device());
}

}  // namespace

// test_grad_scaling_unscale_sparse
TEST(PyTorchGradScalerTest, GradScalingUnscaleSparse) {
  auto inv_scale = torch::full({1}, 0.25, torch::dtype(torch::kFloat));
  auto found_inf = torch::empty({1}, torch::dtype(torch::kFloat));

  const std::vector<std::vector<int64_t>> i = {{0, 1, 1}, {2, 0, 2}};
  auto s = sparse(i, {16., 32., 64.}, torch::kFloat);
  auto p = s.clone();
  ASSERT_TRUE(p.is_sparse());
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(1.0));

  // Unscales a sparse grad.
  p.mutable_grad() = s.clone();
  auto fi = unscale_and_get(opt, inv_scale, found_inf, false);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 0.0);
  EXPECT_TRUE(tensors_close(p.grad().to_dense(), s.div(4).to_dense(), 1e-7, 1e-5));

  // A sparse grad holding an inf.
  p.mutable_grad() = sparse(i, {16., 32., kInf}, torch::kFloat);
  fi = unscale_and_get(opt, inv_scale, found_inf, false);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 1.0);

  // A sparse grad holding a nan.
  p.mutable_grad() = sparse(i, {16., 32., kNan}, torch::kFloat);
  fi = unscale_and_get(opt, inv_scale, found_inf, false);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 1.0);

  // An fp16 sparse grad, fp16 allowed.
  auto p16 = s.clone().to(torch::kHalf);
  torch::optim::SGD opt16({p16}, torch::optim::SGDOptions(1.0));
  p16.mutable_grad() = s.clone().to(torch::kHalf);
  fi = unscale_and_get(opt16, inv_scale, found_inf, true);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 0.0);
  EXPECT_TRUE(tensors_close(p16.grad().to_dense(), s.to(torch::kHalf).div(4).to_dense(), 1e-7,
                            1e-5));

  // An uncoalesced fp16 grad whose coalesced form overflows: 64000 + 64000 > 65504.
  p16.mutable_grad() = sparse({{0, 1, 0}, {2, 0, 2}}, {64000., 32., 64000.}, torch::kHalf);
  ASSERT_FALSE(p16.grad().is_coalesced());
  fi = unscale_and_get(opt16, inv_scale, found_inf, true);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 1.0);
}

// TestShardGradScaler.test_scaling_unscaling_sparse, with GradScaler's gradient walk (the
// sharded scaler's allow_fp16=True) and, as the spec's porting caveat says, a new optimizer for
// the fp16 case (PyTorch's reuses the old one and so re-checks the previous, inf, grad).
TEST(PyTorchShardGradScalerTest, ScalingUnscalingSparse) {
  auto inv_scale = torch::full({1}, 0.5, torch::dtype(torch::kFloat));
  auto found_inf = torch::full({1}, 0.0, torch::dtype(torch::kFloat));

  const std::vector<std::vector<int64_t>> i = {{0, 1, 1}, {2, 0, 2}};
  auto s = sparse(i, {16., 32., 64.}, torch::kFloat);

  // Unscales sparse tensors.
  auto s1 = s.clone();
  s1.mutable_grad() = s.clone();
  torch::optim::SGD opt({s1}, torch::optim::SGDOptions(1.0));
  auto fi = unscale_and_get(opt, inv_scale, found_inf, true);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 0.0);
  EXPECT_TRUE(tensors_close(s1.grad().to_dense(), s.div(2).to_dense(), 1e-7, 1e-5));

  // Unscales a sparse tensor holding an inf.
  s1.mutable_grad() = sparse(i, {16., 32., kInf}, torch::kFloat);
  fi = unscale_and_get(opt, inv_scale, found_inf, true);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 1.0);

  // Overflow when coalescing: 2^15 + 2^15 = 65536 is inf in fp16.
  auto s16 = sparse({{1, 1, 1}, {0, 0, 2}}, {32768., 32768., 1.0}, torch::kHalf);
  s16.mutable_grad() = s16.clone();
  torch::optim::SGD opt16({s16}, torch::optim::SGDOptions(1.0));
  fi = unscale_and_get(opt16, inv_scale, found_inf, true);
  ASSERT_TRUE(fi.defined());
  EXPECT_EQ(value_of(fi), 1.0);
}

// test_grad_scale_will_not_overflow
TEST(PyTorchGradScalerTest, GradScaleWillNotOverflow) {
  torch::manual_seed(mixprec_test::kScalingCaseSeed);
  torch::nn::Linear model(5, 1);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions());
  mixprec::GradScaler scaler(mixprec::GradScalerOptions()
                                 .growth_interval(1)
                                 .growth_factor(std::pow(2.0, 4))
                                 .init_scale(1e38));
  optimizer.zero_grad();
  auto x = torch::randn({1, 5});
  auto y = 1e-30 * torch::randn({1, 1});
  auto l = (model->forward(x) - y).pow(2).mean();
  scaler.scale(l).backward();
  scaler.step(optimizer);
  scaler.update();
  auto scale = scaler.get_scale_async();
  ASSERT_TRUE(scale.defined());
  EXPECT_FALSE(scale.isinf().item<bool>());
  EXPECT_FALSE(scale.isnan().item<bool>());
  // Either the growth to 1e38 * 16 was suppressed (clean step) or the scale backed off.
  const float s = scale.item<float>();
  EXPECT_TRUE(s == 1e38f || s == 1e38f / 2) << s;
}
