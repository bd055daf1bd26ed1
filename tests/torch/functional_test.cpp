// The functional ops on LibTorch tensors: argument checks in PyTorch's words, non-dense grads,
// and the core's fp16/bf16 rounding cross-checked against c10::Half and c10::BFloat16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <limits>

#include "mixprec/core/error.h"
#include "mixprec/core/half.h"
#include "mixprec/mixprec.h"
#include "mixprec/optim.h"
#include "torch/test_util.h"
#include "torch/views.h"

namespace mixprec {
namespace {

torch::Tensor f32(float v) { return torch::full({1}, v); }

TEST(FunctionalTest, UnscalesEveryDTypeInOneCall) {
  std::vector<torch::Tensor> grads = {torch::full({5}, 4.0), torch::full({5}, 4.0, torch::kDouble),
                                      torch::full({5}, 4.0, torch::kHalf),
                                      torch::full({5}, 4.0, torch::kBFloat16)};
  torch::Tensor found = f32(0.0f);
  non_finite_check_and_unscale_(grads, found, f32(0.25f));
  EXPECT_EQ(found.item<float>(), 0.0f);
  for (const auto& g : grads) EXPECT_TRUE(torch::equal(g, torch::ones({5}, g.scalar_type())));
}

TEST(FunctionalTest, NonContiguousAndNonDenseGradsAreUnscaledInPlace) {
  torch::Tensor base = torch::full({6, 6}, 8.0);
  torch::Tensor transposed = base.t();        // dense, not contiguous
  torch::Tensor strided = torch::full({6, 6}, 8.0);
  torch::Tensor slice = strided.slice(1, 0, 3);  // not dense
  torch::Tensor found = f32(0.0f);
  non_finite_check_and_unscale_({transposed, slice}, found, f32(0.5f));
  EXPECT_TRUE(torch::equal(base, torch::full({6, 6}, 4.0)));
  EXPECT_TRUE(torch::equal(strided.slice(1, 0, 3), torch::full({6, 3}, 4.0)));
  EXPECT_TRUE(torch::equal(strided.slice(1, 3, 6), torch::full({6, 3}, 8.0)));  // untouched
  slice[2][1] = std::numeric_limits<float>::infinity();
  non_finite_check_and_unscale_({slice}, found, f32(1.0f));
  EXPECT_EQ(found.item<float>(), 1.0f);
}

TEST(FunctionalTest, ArgumentChecksUsePyTorchsWords) {
  std::vector<torch::Tensor> g = {torch::ones({2})};
  torch::Tensor found = f32(0.0f);
  EXPECT_THROW_WITH(non_finite_check_and_unscale_(g, found, torch::ones({2})),
                    "inv_scale must be a 1-element tensor.");
  EXPECT_THROW_WITH(non_finite_check_and_unscale_(g, found, torch::ones({1}, torch::kDouble)),
                    "inv_scale must be a float tensor.");
  torch::Tensor found_int = torch::zeros({1}, torch::kInt);
  EXPECT_THROW_WITH(non_finite_check_and_unscale_(g, found_int, f32(1.0f)),
                    "found_inf must be a float tensor.");
  std::vector<torch::Tensor> sparse = {torch::eye(2).to_sparse()};
  EXPECT_THROW_WITH(non_finite_check_and_unscale_(sparse, found, f32(1.0f)),
                    "one of scaled_grads was not a strided tensor.");
  std::vector<torch::Tensor> ints = {torch::ones({2}, torch::kInt)};
  EXPECT_THROW_WITH(non_finite_check_and_unscale_(ints, found, f32(1.0f)),
                    "expected a float32, float64, float16 or bfloat16 tensor");
  non_finite_check_and_unscale_({}, found, torch::ones({3}));  // empty list: no checks at all
}

TEST(FunctionalTest, UpdateScaleChecksAndRule) {
  torch::Tensor scale = f32(4.0f);
  torch::Tensor tracker = torch::zeros({1}, torch::kInt);
  torch::Tensor found = f32(0.0f);
  update_scale_(scale, tracker, found, 2.0, 0.25, 2);
  EXPECT_EQ(tracker.item<int>(), 1);
  update_scale_(scale, tracker, found, 2.0, 0.25, 2);
  EXPECT_EQ(scale.item<float>(), 8.0f);
  EXPECT_EQ(tracker.item<int>(), 0);
  torch::Tensor tracker_long = torch::zeros({1}, torch::kLong);
  EXPECT_THROW_WITH(update_scale_(scale, tracker_long, found, 2.0, 0.5, 1),
                    "growth_tracker must be an int tensor.");
  torch::Tensor scale_double = torch::ones({1}, torch::kDouble);
  EXPECT_THROW_WITH(update_scale_(scale_double, tracker, found, 2.0, 0.5, 1),
                    "current_scale must be a float tensor.");
  torch::Tensor two = torch::ones({2});
  EXPECT_THROW_WITH(update_scale_(two, tracker, found, 2.0, 0.5, 1),
                    "current_scale must be a 1-element tensor.");
}

TEST(FunctionalTest, CoreRoundingAgreesWithC10HalfAndBFloat16) {
  // Every 16-bit pattern through c10's types and the core's, and a sweep of floats.
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const auto bits = static_cast<std::uint16_t>(u);
    const float h = static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
    const float b = static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()));
    if (!std::isnan(h)) {
      ASSERT_EQ(core::half_bits_to_float(bits), h) << u;
    }
    if (!std::isnan(b)) {
      ASSERT_EQ(core::bf16_bits_to_float(bits), b) << u;
    }
  }
  for (float f = -70000.0f; f < 70000.0f; f += 0.37f) {
    ASSERT_EQ(core::float_to_half_bits(f), c10::Half(f).x) << f;
    ASSERT_EQ(core::float_to_bf16_bits(f), c10::BFloat16(f).x) << f;
  }
}

// The LibTorch boundary: every kernel call of the adapter (functional ops, GradScaler, fused
// optimizers) reaches the core through detail::on_device, where a core::Error leaves as the
// c10::Error the README promises, with the core's message.
TEST(FunctionalTest, CoreErrorsLeaveTheAdapterAsC10Errors) {
  try {
    detail::on_device(c10::Device(c10::kCPU),
                      [](void*) { MIXPREC_CHECK(false, "raised in the core"); });
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("raised in the core"), std::string::npos) << e.what();
  }
}

// The kernels write through raw pointers. Like PyTorch's in-place ops they bump the versions of
// the tensors they take to write, so autograd refuses a saved tensor they changed instead of
// silently computing with its new value.
// A CUDA tensor reaching a mixprec built without CUDA is refused with how to get CUDA support
// (docs/errors.md); a CUDA build takes it. c10::Device needs no GPU, so both builds check here.
TEST(FunctionalTest, CudaTensorsInABuildWithoutCudaSayHowToGetIt) {
  const c10::Device cuda(c10::kCUDA, 0);
  if (detail::torch_cuda_built()) {
    EXPECT_NO_THROW(detail::check_kernel_device(cuda));
  } else {
    EXPECT_THROW_WITH(detail::check_kernel_device(cuda),
                      "mixprec: got tensors on cuda:0, but this mixprec was built without CUDA. "
                      "Build it against a CUDA LibTorch with nvcc installed: MIXPREC_WITH_CUDA "
                      "then defaults to ON");
  }
  EXPECT_NO_THROW(detail::check_kernel_device(c10::Device(c10::kCPU)));
  EXPECT_THROW_WITH(detail::check_kernel_device(c10::Device(c10::kMeta)),
                    "only CPU and CUDA tensors are supported");
}

TEST(FunctionalTest, KernelsBumpTheVersionsOfWhatTheyWrite) {
  torch::Tensor g = torch::ones({4}), found = torch::zeros({}), inv = torch::full({}, 0.5f);
  const auto g_version = g._version(), found_version = found._version();
  non_finite_check_and_unscale_({g}, found, inv);
  EXPECT_GT(g._version(), g_version);
  EXPECT_GT(found._version(), found_version);
  torch::Tensor scale = torch::full({}, 4.0f), tracker = torch::zeros({}, torch::kInt);
  const auto scale_version = scale._version(), tracker_version = tracker._version();
  update_scale_(scale, tracker, found, 2.0, 0.5, 10);
  EXPECT_GT(scale._version(), scale_version);
  EXPECT_GT(tracker._version(), tracker_version);
}

// y saves w; after w changed in place, backward through y must refuse.
void expect_backward_refuses_a_changed_parameter(const std::function<void(torch::Tensor&)>& change,
                                                 const char* name) {
  torch::Tensor w = torch::ones({3}, torch::requires_grad());
  torch::Tensor y = (w * w).sum();
  y.backward({}, /*retain_graph=*/true);
  change(w);
  EXPECT_THROW(y.backward(), c10::Error) << name << ": backward used the changed parameter";
}

template <typename Optimizer, typename Options>
std::function<void(torch::Tensor&)> step_with(const Options& options) {
  return [options](torch::Tensor& w) {
    Optimizer optimizer(std::vector<torch::Tensor>{w}, options);
    optimizer.step();
  };
}

// The control is what Python's torch.optim and PyTorch's fused kernels do: an in-place update
// under no_grad. (LibTorch's C++ torch::optim::SGD of 1.13 updates p.data(), a view with its own
// version counter, so it escapes the check; mixprec follows PyTorch's fused kernels.)
TEST(FunctionalTest, BackwardThroughAGraphThatSavedASteppedParameterThrows) {
  using namespace torch::optim;
  expect_backward_refuses_a_changed_parameter(
      [](torch::Tensor& w) {
        torch::NoGradGuard no_grad;
        w.add_(w.grad(), -0.1);
      },
      "in-place add_ under no_grad");
  expect_backward_refuses_a_changed_parameter(step_with<mixprec::optim::SGD>(SGDOptions(0.1)),
                                              "mixprec::optim::SGD");
  expect_backward_refuses_a_changed_parameter(step_with<mixprec::optim::Adam>(AdamOptions(0.1)),
                                              "mixprec::optim::Adam");
  expect_backward_refuses_a_changed_parameter(step_with<mixprec::optim::AdamW>(AdamWOptions(0.1)),
                                              "mixprec::optim::AdamW");
}

}  // namespace
}  // namespace mixprec
