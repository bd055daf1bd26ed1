// The update rule (core::next_scale_state), one test per transition of torch._amp_update_scale_.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "mixprec/core/scale_policy.h"

namespace mixprec::core {
namespace {

ScalePolicy policy(double growth, double backoff, std::int64_t interval) {
  ScalePolicy p;
  p.growth_factor = growth;
  p.backoff_factor = backoff;
  p.growth_interval = interval;
  return p;
}

TEST(ScalePolicyTest, DefaultsArePyTorchs) {
  const ScalePolicy p;
  EXPECT_EQ(p.growth_factor, 2.0);
  EXPECT_EQ(p.backoff_factor, 0.5);
  EXPECT_EQ(p.growth_interval, 2000);
  const ScaleState s;
  EXPECT_EQ(s.scale, 65536.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(ScalePolicyTest, CleanStepBelowIntervalCountsUpAndKeepsScale) {
  const ScaleState s = next_scale_state({1024.0f, 5}, 0.0f, policy(2.0, 0.5, 2000));
  EXPECT_EQ(s.scale, 1024.0f);
  EXPECT_EQ(s.growth_tracker, 6);
}

TEST(ScalePolicyTest, GrowsExactlyAtTheIntervalAndResetsTracker) {
  const ScalePolicy p = policy(2.0, 0.5, 3);
  ScaleState s{8.0f, 0};
  s = next_scale_state(s, 0.0f, p);
  EXPECT_EQ(s.scale, 8.0f);
  EXPECT_EQ(s.growth_tracker, 1);
  s = next_scale_state(s, 0.0f, p);
  EXPECT_EQ(s.scale, 8.0f);
  EXPECT_EQ(s.growth_tracker, 2);
  s = next_scale_state(s, 0.0f, p);  // third clean step: tracker + 1 == interval
  EXPECT_EQ(s.scale, 16.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(ScalePolicyTest, BackoffMultipliesAndResetsTracker) {
  const ScaleState s = next_scale_state({1024.0f, 1999}, 1.0f, policy(2.0, 0.5, 2000));
  EXPECT_EQ(s.scale, 512.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(ScalePolicyTest, FactorsApplyInDoubleThenRoundToFloat) {
  // 3 * 0.1 in double, rounded once to float (not float(3) * float(0.1)).
  ScaleState s = next_scale_state({3.0f, 0}, 1.0f, policy(2.0, 0.1, 10));
  EXPECT_EQ(s.scale, static_cast<float>(3.0 * 0.1));
  s = next_scale_state({1024.0f, 0}, 0.0f, policy(1.5, 0.5, 1));
  EXPECT_EQ(s.scale, 1536.0f);
}

TEST(ScalePolicyTest, AnyNonZeroFoundInfBacksOff) {
  const ScalePolicy p = policy(2.0, 0.5, 2000);
  EXPECT_EQ(next_scale_state({64.0f, 3}, 2.0f, p).scale, 32.0f);  // a sum over two devices
  EXPECT_EQ(next_scale_state({64.0f, 3}, -1.0f, p).scale, 32.0f);
  EXPECT_EQ(next_scale_state({64.0f, 3}, std::nanf(""), p).scale, 32.0f);
  EXPECT_EQ(next_scale_state({64.0f, 3}, std::numeric_limits<float>::infinity(), p).scale, 32.0f);
}

TEST(ScalePolicyTest, GrowthThatWouldOverflowFloat32IsSuppressedButTrackerResets) {
  // PyTorch's test_grad_scale_will_not_overflow: 1e38 * 16 is not a float.
  ScaleState s = next_scale_state({1e38f, 0}, 0.0f, policy(16.0, 0.5, 1));
  EXPECT_EQ(s.scale, 1e38f);
  EXPECT_EQ(s.growth_tracker, 0);
  // 2^127 * 2 = 2^128 overflows; 2^126 * 2 = 2^127 does not.
  s = next_scale_state({std::ldexp(1.0f, 127), 4}, 0.0f, policy(2.0, 0.5, 5));
  EXPECT_EQ(s.scale, std::ldexp(1.0f, 127));
  EXPECT_EQ(s.growth_tracker, 0);
  s = next_scale_state({std::ldexp(1.0f, 126), 0}, 0.0f, policy(2.0, 0.5, 1));
  EXPECT_EQ(s.scale, std::ldexp(1.0f, 127));
}

TEST(ScalePolicyTest, GrowthRoundingUpToFloatMaxIsKept) {
  // FLT_MAX / 2 * 2 rounds to FLT_MAX exactly: finite, so it is taken.
  const float half_max = FLT_MAX / 2;
  const ScaleState s = next_scale_state({half_max, 0}, 0.0f, policy(2.0, 0.5, 1));
  EXPECT_EQ(s.scale, FLT_MAX);
}

TEST(ScalePolicyTest, IntervalOneGrowsEveryCleanStep) {
  const ScalePolicy p = policy(2.0, 0.5, 1);
  ScaleState s{1.0f, 0};
  for (int i = 1; i <= 10; ++i) {
    s = next_scale_state(s, 0.0f, p);
    EXPECT_EQ(s.scale, std::ldexp(1.0f, i));
    EXPECT_EQ(s.growth_tracker, 0);
  }
}

TEST(ScalePolicyTest, BackoffHasNoFloorAndReachesDenormalsThenZero) {
  const ScalePolicy p = policy(2.0, 0.5, 2000);
  ScaleState s{std::ldexp(1.0f, -125), 0};
  s = next_scale_state(s, 1.0f, p);
  EXPECT_EQ(s.scale, std::ldexp(1.0f, -126));  // smallest normal
  s = next_scale_state(s, 1.0f, p);
  EXPECT_EQ(s.scale, std::ldexp(1.0f, -127));  // subnormal
  EXPECT_EQ(std::fpclassify(s.scale), FP_SUBNORMAL);
  for (int i = 0; i < 22; ++i) s = next_scale_state(s, 1.0f, p);
  EXPECT_EQ(s.scale, std::ldexp(1.0f, -149));  // smallest subnormal
  s = next_scale_state(s, 1.0f, p);  // 2^-150 rounds to even: 0
  EXPECT_EQ(s.scale, 0.0f);
  s = next_scale_state(s, 0.0f, policy(2.0, 0.5, 1));  // growth of 0 stays 0
  EXPECT_EQ(s.scale, 0.0f);
  EXPECT_TRUE(std::isinf(inverse_scale(s.scale)));  // the collapse PyTorch documents
}

TEST(ScalePolicyTest, NonPositiveIntervalNeverGrowsAndTrackerSaturates) {
  ScaleState s = next_scale_state({4.0f, 7}, 0.0f, policy(2.0, 0.5, 0));
  EXPECT_EQ(s.scale, 4.0f);
  EXPECT_EQ(s.growth_tracker, 8);
  s = next_scale_state({4.0f, INT32_MAX}, 0.0f, policy(2.0, 0.5, -3));
  EXPECT_EQ(s.scale, 4.0f);
  EXPECT_EQ(s.growth_tracker, INT32_MAX);
}

TEST(ScalePolicyTest, PyTorchUpdateScaleSequence) {
  // test_grad_scaling_update_scale: growth 2, backoff 0.25, interval 2, scale 4.
  const ScalePolicy p = policy(2.0, 0.25, 2);
  ScaleState s{4.0f, 0};
  s = next_scale_state(s, 0.0f, p);
  EXPECT_EQ(s.growth_tracker, 1);
  EXPECT_EQ(s.scale, 4.0f);
  s = next_scale_state(s, 0.0f, p);
  EXPECT_EQ(s.growth_tracker, 0);
  EXPECT_EQ(s.scale, 8.0f);
  s = next_scale_state(s, 1.0f, p);
  EXPECT_EQ(s.growth_tracker, 0);
  EXPECT_EQ(s.scale, 2.0f);
}

TEST(ScalePolicyTest, InverseScaleIsTheDoubleReciprocalRoundedToFloat) {
  EXPECT_EQ(inverse_scale(65536.0f), 1.0f / 65536.0f);
  EXPECT_EQ(inverse_scale(3.0f), static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(inverse_scale(1.0f), 1.0f);
}

}  // namespace
}  // namespace mixprec::core
