// Gradient clipping (mixprec/clip.h, GradScaler::clip_grad_norm_) against PyTorch 2.15, written
// out: the expected bits below were printed by Python 2.15.0 (torch.amp.GradScaler("cpu").unscale_
// then torch.nn.utils.clip_grads_with_norm_ with the fp64 norm rounded to float32, the norm
// clip_grad_norm_ must return), so they hold on every LibTorch, 1.13 included; tests/python/
// clip_differential.py compares with the installed PyTorch directly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "mixprec/clip.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/optim.h"

namespace {

using at::Tensor;

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Every element's bits: float32 as 32 bits, bfloat16 as 16.
std::vector<std::uint32_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<std::uint32_t> out;
  if (c.scalar_type() == at::kBFloat16) {
    const auto* p = static_cast<const std::uint16_t*>(c.data_ptr());
    out.assign(p, p + c.numel());
  } else {
    const float* p = c.data_ptr<float>();
    for (std::int64_t i = 0; i < c.numel(); ++i) out.push_back(bits(p[i]));
  }
  return out;
}

// Python: ((i * 37 + k) % 23 - 11) * 0.173 * mult in double, then .to(dtype).
Tensor values(std::int64_t n, int k, double mult, at::ScalarType dtype) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < n; ++i) {
    v.push_back(static_cast<double>((i * 37 + k) % 23 - 11) * 0.173 * mult);
  }
  return torch::tensor(v, at::kDouble).to(dtype);
}

// Three parameters (3x4 and 5 float32, 2x3 of `dtype3`) with grads `scale` times the values.
std::vector<Tensor> make_params(double scale, at::ScalarType dtype3) {
  const std::vector<std::vector<std::int64_t>> shapes{{3, 4}, {5}, {2, 3}};
  std::vector<Tensor> params;
  for (int j = 0; j < 3; ++j) {
    const at::ScalarType dtype = j == 2 ? dtype3 : at::kFloat;
    Tensor p = torch::zeros(shapes[static_cast<std::size_t>(j)], dtype).set_requires_grad(true);
    p.mutable_grad() = values(p.numel(), j, scale, dtype).reshape(p.sizes());
    params.push_back(p);
  }
  return params;
}

struct Case {
  double scale, max_norm, norm_type;
  at::ScalarType dtype3;
  std::uint32_t norm;
  std::vector<std::vector<std::uint32_t>> grads;
};

// Printed by Python 2.15.0 (see the file's comment).
const std::vector<Case>& scaler_cases() {
  static const std::vector<Case> cases{
      {1000.0, 0.37, 2.0, at::kFloat, 0x40b4eb01,
       {{0xbdff0ece, 0x3d0b1f59, 0xbd8b1f59, 0x3db97f21, 0xbc397f21, 0xbde7deea, 0x3d397f21,
         0xbd67deea, 0x3dd0af05, 0x00000000, 0xbdd0af05, 0x3d67deea},
        {0xbde7deea, 0x3d397f21, 0xbd67deea, 0x3dd0af05, 0x00000000},
        {0xbdd0af05, 0x3d67deea, 0xbd397f21, 0x3de7deea, 0x3c397f21, 0xbdb97f21}}},
      {65536.0, 0.37, 2.0, at::kBFloat16, 0x40b4d803,
       {{0xbdff2997, 0x3d0b2df5, 0xbd8b2df5, 0x3db9929c, 0xbc39929c, 0xbde7f744, 0x3d39929c,
         0xbd67f744, 0x3dd0c4f0, 0x00000000, 0xbdd0c4f0, 0x3d67f744},
        {0xbde7f744, 0x3d39929c, 0xbd67f744, 0x3dd0c4f0, 0x00000000},
        {0xbdd0, 0x3d68, 0xbd39, 0x3de8, 0x3c39, 0xbdb9}}},
      {1000.0, 0.37, std::numeric_limits<double>::infinity(), at::kBFloat16, 0x3ff39582,
       {{0xbebd709d, 0x3dcea966, 0xbe4ea966, 0x3e89c643, 0xbd09c643, 0xbeac37d5, 0x3e09c643,
         0xbe2c37d5, 0x3e9aff0c, 0x00000000, 0xbe9aff0c, 0x3e2c37d5},
        {0xbeac37d5, 0x3e09c643, 0xbe2c37d5, 0x3e9aff0c, 0x00000000},
        {0xbe9c, 0x3e2c, 0xbe0a, 0x3eac, 0x3d0a, 0xbe8a}}},
      // max_norm above the norm: the coefficient clamps to 1, the grads are only unscaled.
      {3.0, 100.0, 2.0, at::kFloat, 0x40b4eb00,
       {{0xbff39582, 0x3f04dd30, 0xbf84dd30, 0x3fb126ea, 0xbe3126ea, 0xbfdd70a4, 0x3f3126ea,
         0xbf5d70a4, 0x3fc74bc7, 0x00000000, 0xbfc74bc7, 0x3f5d70a4},
        {0xbfdd70a4, 0x3f3126ea, 0xbf5d70a4, 0x3fc74bc7, 0x00000000},
        {0xbfc74bc7, 0x3f5d70a4, 0xbf3126ea, 0x3fdd70a4, 0x3e3126ea, 0xbfb126ea}}},
  };
  return cases;
}

void expect_case(const Case& c, const Tensor& norm, const std::vector<Tensor>& params,
                 const char* path) {
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_EQ(norm.scalar_type(), at::kFloat);
  EXPECT_EQ(bits(norm.item<float>()), c.norm) << path << " scale " << c.scale;
  for (std::size_t j = 0; j < params.size(); ++j) {
    EXPECT_EQ(bits_of(params[j].grad()), c.grads[j])
        << path << " scale " << c.scale << " p " << c.norm_type << " param " << j;
  }
}

mixprec::GradScaler scaler_at(double scale) {
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(scale));
  scaler.scale(torch::ones({}));  // creates the scale on the CPU
  return scaler;
}

TEST(ClipTest, ScalerClipOfATorchOptimizerGivesPythonsGradsBitForBit) {
  for (const Case& c : scaler_cases()) {
    std::vector<Tensor> params = make_params(c.scale, c.dtype3);
    torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
    mixprec::GradScaler scaler = scaler_at(c.scale);
    const Tensor norm = scaler.clip_grad_norm_(opt, c.max_norm, c.norm_type);
    expect_case(c, norm, params, "torch::optim::SGD");
    EXPECT_EQ(scaler.stage(opt), mixprec::OptState::kUnscaled);
    scaler.step(opt);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), c.scale) << "a clean step";
  }
}

TEST(ClipTest, FusedOptimizerAppliesScaleAndCoefficientInItsStep) {
  for (const Case& c : scaler_cases()) {
    std::vector<Tensor> params = make_params(c.scale, c.dtype3);
    mixprec::optim::SGD opt(params, torch::optim::SGDOptions(0.1).momentum(0.9));
    mixprec::GradScaler scaler = scaler_at(c.scale);
    const Tensor norm = scaler.clip_grad_norm_(opt, c.max_norm, c.norm_type);
    EXPECT_EQ(bits(norm.item<float>()), c.norm);
    // The grads are still scaled: the step unscales and clips them in its own pass.
    EXPECT_EQ(bits_of(params[0].grad()), bits_of(make_params(c.scale, c.dtype3)[0].grad()));
    EXPECT_THROW(scaler.unscale_(opt), c10::Error);
    scaler.step(opt);
    expect_case(c, norm, params, "mixprec::optim::SGD");
    // The update is the optimizer's own on those grads (unscaled, no clip): for float32 that is
    // LibTorch's SGD too; bf16 parameters compute in float and round once, as PyTorch's fused
    // optimizers (torch::optim::SGD rounds its buffer to bf16 first: an ulp apart here).
    std::vector<Tensor> twin = make_params(c.scale, c.dtype3), plain = make_params(1.0, c.dtype3);
    for (std::size_t j = 0; j < twin.size(); ++j) {
      twin[j].mutable_grad() = params[j].grad().clone();
      plain[j].mutable_grad() = params[j].grad().clone();
    }
    mixprec::optim::SGD reference(twin, torch::optim::SGDOptions(0.1).momentum(0.9));
    reference.step();
    torch::optim::SGD libtorch(plain, torch::optim::SGDOptions(0.1).momentum(0.9));
    libtorch.step();
    for (std::size_t j = 0; j < twin.size(); ++j) {
      EXPECT_EQ(bits_of(params[j].detach()), bits_of(twin[j].detach())) << "param " << j;
      if (params[j].scalar_type() == at::kFloat) {
        EXPECT_EQ(bits_of(params[j].detach()), bits_of(plain[j].detach())) << "param " << j;
      }
    }
  }
}

TEST(ClipTest, FusedAdamWEqualsUnscaleClipThenStep) {
  for (double scale : {65536.0, 1000.0}) {
    std::vector<Tensor> a = make_params(scale, at::kFloat), b = make_params(scale, at::kFloat);
    const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
    mixprec::optim::AdamW fused(a, options), unfused(b, options);
    mixprec::GradScaler s1 = scaler_at(scale), s2 = scaler_at(scale);
    const Tensor n1 = s1.clip_grad_norm_(fused, 0.37);
    s1.step(fused);
    s2.unscale_(unfused);
    const Tensor n2 = mixprec::clip_grad_norm_(b, 0.37);
    s2.step(unfused);
    EXPECT_EQ(bits(n1.item<float>()), bits(n2.item<float>()));
    for (std::size_t j = 0; j < a.size(); ++j) {
      EXPECT_EQ(bits_of(a[j].grad()), bits_of(b[j].grad())) << "grad " << j;
      EXPECT_EQ(bits_of(a[j].detach()), bits_of(b[j].detach())) << "param " << j;
    }
  }
}

TEST(ClipTest, ScalerClipKeepsPyTorchsStateMachine) {
  std::vector<Tensor> params = make_params(1000.0, at::kFloat);
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
  mixprec::GradScaler scaler = scaler_at(1000.0);
  scaler.clip_grad_norm_(opt, 1.0);
  try {
    scaler.unscale_(opt);
    ADD_FAILURE() << "unscale_ after clip_grad_norm_ must throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "unscale_() has already been called on this optimizer since the last update()."),
              std::string::npos);
  }
  EXPECT_THROW(scaler.clip_grad_norm_(opt, 1.0), c10::Error);
  scaler.step(opt);
  try {
    scaler.clip_grad_norm_(opt, 1.0);
    ADD_FAILURE() << "clip_grad_norm_ after step must throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unscale_() is being called after step()."),
              std::string::npos);
  }
  scaler.update();
  // fp16 grads are refused as unscale_ refuses them.
  std::vector<Tensor> half = make_params(1000.0, at::kHalf);
  torch::optim::SGD half_opt(half, torch::optim::SGDOptions(0.1));
  try {
    scaler.clip_grad_norm_(half_opt, 1.0);
    ADD_FAILURE() << "fp16 grads must throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Attempting to unscale FP16 gradients."),
              std::string::npos);
  }
}

TEST(ClipTest, AnOverflowSkipsTheStepOnBothPaths) {
  for (bool fused : {false, true}) {
    std::vector<Tensor> params = make_params(1000.0, at::kFloat);
    params[1].mutable_grad()[2] = std::numeric_limits<float>::infinity();
    std::unique_ptr<torch::optim::Optimizer> opt;
    if (fused) {
      opt = std::make_unique<mixprec::optim::AdamW>(params, torch::optim::AdamWOptions(0.1));
    } else {
      opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.1));
    }
    mixprec::GradScaler scaler = scaler_at(1000.0);
    const Tensor norm = scaler.clip_grad_norm_(*opt, 1.0);
    EXPECT_TRUE(std::isinf(norm.item<float>()));
    EXPECT_FALSE(scaler.step(*opt).defined());
    EXPECT_FALSE(scaler.last_step_applied(*opt)) << (fused ? "fused" : "torch");
    for (const Tensor& p : params) EXPECT_TRUE(torch::equal(p.detach(), torch::zeros_like(p)));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 500.0);
  }
}

TEST(ClipTest, DisabledScalerClipsPlainly) {
  std::vector<Tensor> a = make_params(1.0, at::kFloat), b = make_params(1.0, at::kFloat);
  torch::optim::SGD opt(a, torch::optim::SGDOptions(0.1));
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().enabled(false));
  const Tensor n1 = scaler.clip_grad_norm_(opt, 0.37);
  const Tensor n2 = mixprec::clip_grad_norm_(b, 0.37);
  EXPECT_EQ(bits(n1.item<float>()), bits(n2.item<float>()));
  for (std::size_t j = 0; j < a.size(); ++j) EXPECT_EQ(bits_of(a[j].grad()), bits_of(b[j].grad()));
}

TEST(ClipTest, ScalerKeepsAHistoryOfNorms) {
  std::vector<Tensor> params = make_params(1000.0, at::kFloat);
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(1000.0).history_size(2));
  scaler.scale(torch::ones({}));
  EXPECT_TRUE(scaler.grad_norm_history().empty());
  for (int i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < params.size(); ++j) {
      params[j].mutable_grad() = make_params(1000.0 * (i + 1), at::kFloat)[j].grad();
    }
    scaler.clip_grad_norm_(opt, 100.0);
    scaler.step(opt);
    scaler.update();
  }
  const std::vector<double> history = scaler.grad_norm_history();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_NEAR(history[0], 2 * 5.6536865, 1e-5);
  EXPECT_NEAR(history[1], 3 * 5.6536865, 1e-5);
}

// ---- the plain functions ----

const std::vector<Case>& plain_cases() {
  static const std::vector<Case> cases{
      {1.0, 0.37, 2.0, at::kFloat, 0x40b4eb00,
       {{0xbdff0ecf, 0x3d0b1f59, 0xbd8b1f59, 0x3db97f21, 0xbc397f21, 0xbde7deea, 0x3d397f21,
         0xbd67deea, 0x3dd0af06, 0x00000000, 0xbdd0af06, 0x3d67deea},
        {0xbde7deea, 0x3d397f21, 0xbd67deea, 0x3dd0af06, 0x00000000},
        {0xbdd0af06, 0x3d67deea, 0xbd397f21, 0x3de7deea, 0x3c397f21, 0xbdb97f21}}},
      {1.0, 0.37, 1.0, at::kFloat, 0x41bc3958,
       {{0xbcf5285a, 0x3c05b8eb, 0xbc85b8eb, 0x3cb24be4, 0xbb324be4, 0xbcdedede, 0x3c324be4,
         0xbc5edede, 0x3cc89562, 0x00000000, 0xbcc89562, 0x3c5edede},
        {0xbcdedede, 0x3c324be4, 0xbc5edede, 0x3cc89562, 0x00000000},
        {0xbcc89562, 0x3c5edede, 0xbc324be4, 0x3cdedede, 0x3b324be4, 0xbcb24be4}}},
  };
  return cases;
}

TEST(ClipTest, ClipGradNormGivesPythonsGradsBitForBit) {
  for (const Case& c : plain_cases()) {
    std::vector<Tensor> params = make_params(1.0, c.dtype3);
    const Tensor norm = mixprec::clip_grad_norm_(params, c.max_norm, c.norm_type);
    expect_case(c, norm, params, "clip_grad_norm_");
  }
  // The halves, separately.
  std::vector<Tensor> params = make_params(1.0, at::kFloat);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  const Tensor norm = mixprec::get_total_norm(grads);
  mixprec::clip_grads_with_norm_(params, 0.37, norm);
  expect_case(plain_cases()[0], norm, params, "get_total_norm + clip_grads_with_norm_");
  // p = 0 counts the tensors with a non-zero element, as PyTorch's norm of per-tensor norms.
  EXPECT_EQ(mixprec::get_total_norm(grads, 0.0).item<float>(), 3.0f);
}

TEST(ClipTest, NonFiniteNormsBehaveAsPyTorchs) {
  const auto param = [](std::vector<float> g) {
    Tensor p = torch::zeros({static_cast<std::int64_t>(g.size())}).set_requires_grad(true);
    p.mutable_grad() = torch::tensor(g);
    return p;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Python 2.15: an inf gives norm inf and grads [0, nan, 0]; a NaN makes every grad NaN.
  Tensor p = param({1.0f, inf, 2.0f});
  Tensor norm = mixprec::clip_grad_norm_({p}, 1.0);
  EXPECT_TRUE(std::isinf(norm.item<float>()));
  EXPECT_EQ(p.grad()[0].item<float>(), 0.0f);
  EXPECT_TRUE(std::isnan(p.grad()[1].item<float>()));
  EXPECT_EQ(p.grad()[2].item<float>(), 0.0f);
  p = param({1.0f, nan, 2.0f});
  EXPECT_TRUE(std::isnan(mixprec::clip_grad_norm_({p}, 1.0).item<float>()));
  EXPECT_TRUE(torch::isnan(p.grad()).all().item<bool>());
  // error_if_nonfinite: PyTorch's text, and no grad is touched.
  for (double norm_type : {2.0, static_cast<double>(inf)}) {
    p = param({1.0f, inf, 2.0f});
    try {
      mixprec::clip_grad_norm_({p}, 1.0, norm_type, /*error_if_nonfinite=*/true);
      ADD_FAILURE() << "must throw";
    } catch (const c10::Error& e) {
      const std::string order = norm_type == 2.0 ? "2.0" : "inf";
      EXPECT_NE(std::string(e.what()).find(
                    "The total norm of order " + order +
                    " for gradients from `parameters` is non-finite, so it cannot be clipped. To "
                    "disable this error and scale the gradients by the non-finite norm anyway, "
                    "set `error_if_nonfinite=False`"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(p.grad()[0].item<float>(), 1.0f);
  }
  // No grads: tensor(0.), nothing clipped.
  const Tensor empty = mixprec::clip_grad_norm_({torch::zeros({2}).set_requires_grad(true)}, 1.0);
  EXPECT_EQ(empty.item<float>(), 0.0f);
  EXPECT_EQ(empty.dim(), 0);
}

TEST(ClipTest, ClipGradValueClampsAsPyTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor p = torch::zeros({7}).set_requires_grad(true);
  p.mutable_grad() =
      torch::tensor({-3.0f, -0.5f, 0.25f, 2.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN()});
  mixprec::clip_grad_value_({p}, 1.0);
  // Python 2.15: [-1.0, -0.5, 0.25, 1.0, 1.0, -1.0, nan]
  const std::vector<float> want{-1.0f, -0.5f, 0.25f, 1.0f, 1.0f, -1.0f};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(p.grad()[static_cast<std::int64_t>(i)].item<float>(), want[i]);
  }
  EXPECT_TRUE(std::isnan(p.grad()[6].item<float>()));
  // Python 2.15 throws for a list without grads (an internal assert); mixprec does nothing.
  mixprec::clip_grad_value_({torch::zeros({2}).set_requires_grad(true)}, 1.0);
}

TEST(ClipTest, NonContiguousGradsAreClippedInPlace) {
  Tensor p = torch::zeros({4, 6}).set_requires_grad(true);
  Tensor base = torch::arange(48, torch::kFloat).reshape({6, 8});
  p.mutable_grad() = base.t().slice(0, 0, 4).slice(1, 0, 6);  // a strided view into `base`
  ASSERT_FALSE(p.grad().is_contiguous());
  Tensor copy = torch::zeros({4, 6}).set_requires_grad(true);
  copy.mutable_grad() = p.grad().contiguous();
  const Tensor n1 = mixprec::clip_grad_norm_({p}, 1.0);
  const Tensor n2 = mixprec::clip_grad_norm_({copy}, 1.0);
  EXPECT_EQ(bits(n1.item<float>()), bits(n2.item<float>()));
  EXPECT_TRUE(torch::equal(p.grad(), copy.grad()));
  EXPECT_TRUE(torch::equal(base.slice(1, 0, 4).t(), copy.grad())) << "the view's storage was written";
}

}  // namespace
