// Differential tests against PyTorch's own CPU kernels, which LibTorch has from 2.4 on:
//   mixprec::non_finite_check_and_unscale_  vs at::_amp_foreach_non_finite_check_and_unscale_
//   mixprec::update_scale_                  vs at::_amp_update_scale_
//   mixprec::optim::{SGD, Adam, AdamW}      vs at::_fused_sgd_, at::_fused_adam_, at::_fused_adamw_
// The AMP kernels must agree bit for bit (NaN payloads aside: see expect_same_bits). The optimizers compute the same formulas in a different
// order, so they agree to a few float32 ulps (kOptimRtol/kOptimAtol below); found_inf = 1 must
// leave both sides exactly untouched. On LibTorch 1.13 (no CPU kernels) each test skips, saying so.
#include <gtest/gtest.h>
#include <mixprec/mixprec.h>
#include <mixprec/optim.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "torch/test_util.h"

#define SKIP_WITHOUT_PYTORCH_CPU_AMP()                                                          \
  if (!MIXPREC_TORCH_CPU_AMP_KERNELS) {                                                         \
    GTEST_SKIP() << "PyTorch's CPU AMP and fused-optimizer kernels need LibTorch >= 2.4; this " \
                    "is " TORCH_VERSION " (the Debian 13 stage of scripts/test.sh runs these)"; \
  }

namespace {

using torch::Tensor;

// The bits of a floating tensor as integers of the same width, so that -0 and denormals compare
// exactly.
Tensor bits(const Tensor& t) {
  const Tensor c = t.contiguous();
  switch (c.scalar_type()) {
    case torch::kDouble: return c.view(torch::kLong);
    case torch::kFloat: return c.view(torch::kInt);
    default: return c.view(torch::kShort);  // Half, BFloat16
  }
}

// Bit for bit, except inside NaNs: NaN must meet NaN, but its sign and payload are not compared.
// PyTorch's own kernel does not define them: measured on LibTorch 2.6 (AVX2), a bfloat16 NaN
// comes out as 0xFFFF where the element falls in a vector of its loop and as 0x7FC0 in the
// scalar tail, whatever the NaN was, so they depend on the tensor's length and the CPU's vector
// width. (An inf or NaN makes GradScaler skip the step; those gradients are never used.)
void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& where) {
  ASSERT_EQ(a.sizes(), b.sizes()) << where;
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << where;
  const Tensor nan_a = torch::isnan(a), nan_b = torch::isnan(b);
  EXPECT_TRUE(torch::equal(nan_a, nan_b)) << where << ": NaN in different places";
  const Tensor other = nan_a.logical_not().contiguous().view({-1});
  EXPECT_TRUE(torch::equal(bits(a).view({-1}).masked_select(other),
                           bits(b).view({-1}).masked_select(other)))
      << where << "\nmixprec: " << a << "\nPyTorch: " << b;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

// The largest finite value of a floating dtype.
double max_finite(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kDouble: return std::numeric_limits<double>::max();
    case torch::kFloat: return std::numeric_limits<float>::max();
    case torch::kHalf: return 65504.0;
    default: return 3.3895313892515355e38;  // bfloat16: 0x7F7F
  }
}

// Values that exercise every branch of the kernels: normal, tiny, denormal, -0, huge (up to the
// dtype's largest finite value, which overflows when multiplied by an inv_scale > 1), and, when
// asked, inf, -inf and NaN. Without them every value is finite in `dtype` itself, so found_inf = 0
// is compared with PyTorch's in every dtype (a value finite in double only, such as 3e38 in fp16,
// would turn into inf on conversion).
Tensor special_values(torch::Dtype dtype, std::int64_t n, std::mt19937& rng, bool with_non_finite) {
  Tensor t = torch::randn({n}, torch::kDouble) * std::pow(10.0, std::uniform_int_distribution<>(-3, 3)(rng));
  const double max = max_finite(dtype);
  std::vector<double> specials = {0.0,     -0.0,     1e-40,     -1e-42,    1e-6,      6e-8, -3e-8,
                                  1e-45,   60000.0,  -65000.0,  max,       -max,      max / 3};
  if (with_non_finite) {
    specials.insert(specials.end(), {std::numeric_limits<double>::infinity(),
                                     -std::numeric_limits<double>::infinity(),
                                     std::numeric_limits<double>::quiet_NaN()});
  }
  auto acc = t.accessor<double, 1>();
  for (std::int64_t i = 0; i < n; i += 1 + static_cast<std::int64_t>(rng() % 7)) {
    acc[i] = specials[rng() % specials.size()];
  }
  return t.to(dtype);
}

// 1 when any element of `grads` is inf or NaN, else 0: what found_inf must be, by torch::isfinite.
float any_non_finite(const std::vector<Tensor>& grads) {
  for (const Tensor& g : grads) {
    if (g.numel() > 0 && !torch::isfinite(g).all().item<bool>()) return 1.0f;
  }
  return 0.0f;
}

// Runs mixprec's kernel on `ours` and PyTorch's on `theirs` (the same values, separate memory)
// and compares the two found_inf bit for bit, and with what the inputs hold (torch::isfinite), so
// a case that meant to be finite and is not, or the other way round, is caught too.
void unscale_both(std::vector<Tensor>& ours, std::vector<Tensor>& theirs, double inv_scale,
                  const std::string& where) {
  Tensor found_ours = torch::zeros({1}), found_theirs = torch::zeros({1});
  const float expected = any_non_finite(ours);
  const Tensor inv = torch::full({1}, inv_scale);
  mixprec::non_finite_check_and_unscale_(ours, found_ours, inv);
#if MIXPREC_TORCH_CPU_AMP_KERNELS
  at::_amp_foreach_non_finite_check_and_unscale_(theirs, found_theirs, inv);
#endif
  expect_same_bits(found_ours, found_theirs, where + ": found_inf");
  EXPECT_EQ(found_theirs.item<float>(), expected) << where << ": the inputs' found_inf";
}

// Both kernels on copies of `grads`; found_inf and every grad compared bit for bit.
void compare_unscale(const std::vector<Tensor>& grads, double inv_scale, const std::string& where) {
  std::vector<Tensor> ours = clones(grads), theirs = clones(grads);
  unscale_both(ours, theirs, inv_scale, where);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    expect_same_bits(ours[i], theirs[i], where + ": grad " + std::to_string(i));
  }
}

const std::vector<torch::Dtype> kDtypes = {torch::kFloat, torch::kDouble, torch::kHalf,
                                           torch::kBFloat16};
const std::vector<double> kInvScales = {1.0 / 65536, 0.25, 1.0, 3.0, 1.0 / 3, 65536.0};

TEST(PyTorchReferenceUnscaleTest, EveryDtypeWithSpecialsInfNanDenormalsAndNegativeZero) {
  SKIP_WITHOUT_PYTORCH_CPU_AMP();
  std::mt19937 rng(1);
  for (torch::Dtype dtype : kDtypes) {
    for (bool non_finite : {false, true}) {
      for (double inv_scale : kInvScales) {
        // Sizes around SIMD widths and thread chunks, and one large tensor.
        std::vector<Tensor> grads;
        for (std::int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 64, 1000, 70001}) {
          grads.push_back(special_values(dtype, n, rng, non_finite));
        }
        compare_unscale(grads, inv_scale,
                        std::string(c10::toString(dtype)) + (non_finite ? " with inf/NaN" : "") +
                            " inv_scale " + std::to_string(inv_scale));
      }
    }
  }
}

TEST(PyTorchReferenceUnscaleTest, ViewsOffsetsAndEmptyTensors) {
  SKIP_WITHOUT_PYTORCH_CPU_AMP();
  std::mt19937 rng(2);
  for (torch::Dtype dtype : kDtypes) {
    for (bool non_finite : {false, true}) {
      const Tensor base = special_values(dtype, 64 * 33, rng, non_finite).view({64, 33});
      // Each case takes the view of two clones of `base`, one per kernel.
      struct ViewCase {
        const char* name;
        std::function<Tensor(const Tensor&)> view;
      };
      const std::vector<ViewCase> views = {
          {"transposed", [](const Tensor& t) { return t.t(); }},
          {"offset rows", [](const Tensor& t) { return t.narrow(0, 5, 40); }},
          {"offset columns", [](const Tensor& t) { return t.narrow(1, 3, 17); }},
          {"every other element", [](const Tensor& t) { return t.view({-1}).slice(0, 1, c10::nullopt, 2); }},
          {"empty", [](const Tensor& t) { return t.narrow(0, 0, 0); }},
      };
      for (double inv_scale : {0.125, 1.0, 3.0}) {
        for (const ViewCase& v : views) {
          const Tensor ours_base = base.clone(), theirs_base = base.clone();
          std::vector<Tensor> ours = {v.view(ours_base)}, theirs = {v.view(theirs_base)};
          const std::string where = std::string(c10::toString(dtype)) + " " + v.name +
                                    (non_finite ? " with inf/NaN" : "") + " inv_scale " +
                                    std::to_string(inv_scale);
          unscale_both(ours, theirs, inv_scale, where);
          // The whole base: elements outside the view must be untouched on both sides.
          expect_same_bits(ours_base, theirs_base, where + ": base");
        }
      }
    }
  }
}

TEST(PyTorchReferenceUnscaleTest, MixedDtypesAndThousandsOfSmallTensors) {
  SKIP_WITHOUT_PYTORCH_CPU_AMP();
  std::mt19937 rng(3);
  for (bool non_finite : {false, true}) {
    std::vector<Tensor> grads;
    for (int i = 0; i < 4000; ++i) {
      const torch::Dtype dtype = kDtypes[rng() % kDtypes.size()];
      const std::int64_t n = static_cast<std::int64_t>(rng() % 40);  // 0 included
      // Non-finite values in only a few tensors, so found_inf depends on finding them.
      grads.push_back(special_values(dtype, n, rng, non_finite && rng() % 500 == 0));
    }
    for (double inv_scale : {1.0 / 1024, 1.0, 7.0}) {
      compare_unscale(grads, inv_scale,
                      std::string("4000 mixed tensors") + (non_finite ? " with inf/NaN" : "") +
                          " inv_scale " + std::to_string(inv_scale));
    }
  }
}

TEST(PyTorchReferenceUpdateScaleTest, LongRandomSequencesWithNonDefaultFactorsAndIntervals) {
  SKIP_WITHOUT_PYTORCH_CPU_AMP();
  struct Policy {
    double growth, backoff;
    std::int64_t interval;
    double init;
  };
  const std::vector<Policy> policies = {
      {2.0, 0.5, 2000, 65536}, {2.0, 0.5, 1, 1},           {1.5, 0.25, 3, 1024},
      {3.0, 0.7, 7, 0.1},      {1.0001, 0.999, 2, 3e38},   {1e10, 1e-10, 1, 1e30},
      {2.0, 0.5, 5, 1e-40},
  };
  std::mt19937 rng(4);
  for (const Policy& p : policies) {
    for (double p_inf : {0.0, 0.05, 0.5}) {
      Tensor scale_ours = torch::full({1}, p.init), scale_theirs = scale_ours.clone();
      Tensor tracker_ours = torch::zeros({1}, torch::kInt), tracker_theirs = tracker_ours.clone();
      for (int step = 0; step < 3000; ++step) {
        // 0 or 1 as GradScaler passes it; also 2 (a sum over devices) and NaN-free fractions.
        float f = 0;
        if (std::uniform_real_distribution<>(0, 1)(rng) < p_inf) {
          const float choices[] = {1.0f, 2.0f, 0.5f};
          f = choices[rng() % 3];
        }
        const Tensor found_inf = torch::full({1}, f);
        mixprec::update_scale_(scale_ours, tracker_ours, found_inf, p.growth, p.backoff, p.interval);
#if MIXPREC_TORCH_CPU_AMP_KERNELS
        at::_amp_update_scale_(scale_theirs, tracker_theirs, found_inf, p.growth, p.backoff,
                               p.interval);
#endif
        const std::string where = "growth " + std::to_string(p.growth) + " backoff " +
                                  std::to_string(p.backoff) + " interval " +
                                  std::to_string(p.interval) + " init " + std::to_string(p.init) +
                                  " p_inf " + std::to_string(p_inf) + " step " +
                                  std::to_string(step);
        expect_same_bits(scale_ours, scale_theirs, where + ": scale");
        ASSERT_TRUE(torch::equal(tracker_ours, tracker_theirs))
            << where << ": tracker " << tracker_ours.item<int>() << " vs "
            << tracker_theirs.item<int>();
        if (HasFailure()) return;
      }
    }
  }
}

}  // namespace
