// The functional ops on LibTorch tensors: argument checks in PyTorch's words, non-dense grads,
// and the core's fp16/bf16 rounding cross-checked against c10::Half and c10::BFloat16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "mixprec/core/half.h"
#include "mixprec/mixprec.h"
#include "torch/test_util.h"

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

}  // namespace
}  // namespace mixprec
