// The options beyond PyTorch in the one update rule: hysteresis (both refill modes), min/max
// clamps, events and telemetry counters; plus a long random run against a reference model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/reference.h"
#include "mixprec/core/scale_policy.h"

namespace mixprec::core {
namespace {

ScalePolicy with_hysteresis(std::int32_t n, HysteresisRefill refill) {
  ScalePolicy p;
  p.growth_interval = 3;
  p.hysteresis = n;
  p.hysteresis_refill = refill;
  return p;
}

TEST(ScalePolicyExtensionsTest, HysteresisDelaysBackoffButEveryOverflowIsReported) {
  const ScalePolicy p = with_hysteresis(3, HysteresisRefill::kOnGrowth);
  ScaleState s{1024.0f, 2, 3};
  std::uint32_t ev = 0;
  s = next_scale_state(s, 1.0f, p, &ev);
  EXPECT_EQ(s.scale, 1024.0f);
  EXPECT_EQ(s.hysteresis_tracker, 2);
  EXPECT_EQ(s.growth_tracker, 0);  // reset on every overflow
  EXPECT_EQ(ev, kEventOverflow);   // skipped, not backed off
  s = next_scale_state(s, 1.0f, p, &ev);
  EXPECT_EQ(s.scale, 1024.0f);
  EXPECT_EQ(s.hysteresis_tracker, 1);
  s = next_scale_state(s, 1.0f, p, &ev);
  EXPECT_EQ(s.scale, 512.0f);
  EXPECT_EQ(s.hysteresis_tracker, 0);
  EXPECT_EQ(ev, kEventOverflow | kEventBackoff);
  s = next_scale_state(s, 1.0f, p, &ev);  // exhausted: backs off on every overflow
  EXPECT_EQ(s.scale, 256.0f);
  EXPECT_EQ(s.hysteresis_tracker, 0);
}

TEST(ScalePolicyExtensionsTest, OnGrowthRefillWaitsForGrowth) {
  const ScalePolicy p = with_hysteresis(2, HysteresisRefill::kOnGrowth);
  ScaleState s{64.0f, 0, 1};
  s = next_scale_state(s, 0.0f, p);  // clean steps do not refill
  EXPECT_EQ(s.hysteresis_tracker, 1);
  s = next_scale_state(s, 0.0f, p);
  s = next_scale_state(s, 0.0f, p);  // third clean step: growth refills
  EXPECT_EQ(s.scale, 128.0f);
  EXPECT_EQ(s.hysteresis_tracker, 2);
}

TEST(ScalePolicyExtensionsTest, OnCleanStepRefillNeedsConsecutiveOverflows) {
  const ScalePolicy p = with_hysteresis(2, HysteresisRefill::kOnCleanStep);
  ScaleState s{64.0f, 0, 2};
  s = next_scale_state(s, 1.0f, p);
  EXPECT_EQ(s.hysteresis_tracker, 1);
  s = next_scale_state(s, 0.0f, p);  // a clean step refills
  EXPECT_EQ(s.hysteresis_tracker, 2);
  s = next_scale_state(s, 1.0f, p);
  EXPECT_EQ(s.scale, 64.0f);
  s = next_scale_state(s, 1.0f, p);  // second consecutive overflow backs off
  EXPECT_EQ(s.scale, 32.0f);
}

TEST(ScalePolicyExtensionsTest, MinScaleClampsBackoffAndReportsReachingAndOverflowAtMin) {
  ScalePolicy p;
  p.min_scale = 0.75f;  // below 1 is allowed
  std::uint32_t ev = 0;
  ScaleState s{1.0f, 0, 1};
  s = next_scale_state(s, 1.0f, p, &ev);
  EXPECT_EQ(s.scale, 0.75f);
  EXPECT_EQ(ev, kEventOverflow | kEventBackoff | kEventReachedMin);
  s = next_scale_state(s, 1.0f, p, &ev);
  EXPECT_EQ(s.scale, 0.75f);
  EXPECT_EQ(ev, kEventOverflow | kEventReachedMin | kEventOverflowAtMin);  // no backoff possible
}

TEST(ScalePolicyExtensionsTest, MaxScaleClampsGrowth) {
  ScalePolicy p;
  p.growth_interval = 1;
  p.max_scale = 1000.0f;
  std::uint32_t ev = 0;
  ScaleState s = next_scale_state({600.0f, 0, 1}, 0.0f, p, &ev);
  EXPECT_EQ(s.scale, 1000.0f);
  EXPECT_EQ(ev, kEventGrowth | kEventReachedMax);
  s = next_scale_state(s, 0.0f, p, &ev);
  EXPECT_EQ(s.scale, 1000.0f);
  EXPECT_EQ(ev, kEventReachedMax);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(ScalePolicyExtensionsTest, DefaultPolicyHasNoFloorEvenForNegativeBackoff) {
  ScalePolicy p;
  p.backoff_factor = -0.5;  // accepted by the functional op, as PyTorch
  EXPECT_EQ(next_scale_state({8.0f, 0, 1}, 1.0f, p).scale, -4.0f);
}

TEST(ScalePolicyExtensionsTest, CountersFollowAHandComputedRun) {
  ScalePolicy p;
  p.growth_interval = 2;
  float scale = 16.0f;
  std::int32_t tracker = 0;
  std::int64_t c[kNumCounters];
  init_counters(c, 1);
  std::vector<double> history(3 * 4, -7.0);
  // clean, clean (growth to 32), inf (backoff to 16), inf (16 -> 8), clean, clean (growth to 16)
  const float found[] = {0, 0, 1, 1, 0, 0};
  for (float f : found) update_scale_state(&scale, &tracker, c, history.data(), 4, f, p);
  EXPECT_EQ(scale, 16.0f);
  EXPECT_EQ(c[kCounterIterations], 6);
  EXPECT_EQ(c[kCounterSkippedSteps], 2);
  EXPECT_EQ(c[kCounterGrowths], 2);
  EXPECT_EQ(c[kCounterBackoffs], 2);
  EXPECT_EQ(c[kCounterConsecutiveOverflows], 0);
  EXPECT_EQ(c[kCounterLastOverflowIteration], 3);
  EXPECT_EQ(c[kCounterLastEvents], kEventGrowth);
  EXPECT_EQ(c[kCounterHysteresis], 1);
  // Ring of 4: iterations 4, 5 overwrote rows 0, 1; rows 2, 3 hold iterations 2, 3.
  EXPECT_EQ(history, (std::vector<double>{4, 8, 0, 5, 16, 0, 2, 16, 1, 3, 8, 1}));
}

TEST(ScalePolicyExtensionsTest, AMillionRandomStepsMatchTheReferenceModel) {
  std::mt19937_64 rng(2024);
  for (int run = 0; run < 20; ++run) {
    ScalePolicy p;
    p.growth_factor = std::vector<double>{2.0, 1.5, 4.0, 1.001}[rng() % 4];
    p.backoff_factor = std::vector<double>{0.5, 0.25, 0.9, 0.1}[rng() % 4];
    p.growth_interval = 1 + static_cast<std::int64_t>(rng() % 20);
    p.hysteresis = 1 + static_cast<std::int32_t>(rng() % 4);
    p.hysteresis_refill = rng() % 2 ? HysteresisRefill::kOnGrowth : HysteresisRefill::kOnCleanStep;
    p.min_scale = rng() % 2 ? 0.0f : std::ldexp(1.0f, -static_cast<int>(rng() % 10));
    p.max_scale = rng() % 2 ? 3.40282347e+38f : std::ldexp(1.0f, 20 + static_cast<int>(rng() % 80));
    const double overflow_rate = std::vector<double>{0.001, 0.05, 0.3, 0.9}[rng() % 4];
    std::bernoulli_distribution overflow(overflow_rate);
    ScaleState s{65536.0f, 0, p.hysteresis};
    testing::ReferenceScaleModel ref{65536.0, 0, p.hysteresis};
    for (int i = 0; i < 50000; ++i) {
      const bool o = overflow(rng);
      s = next_scale_state(s, o ? 1.0f : 0.0f, p);
      ref.step(o, p);
      ASSERT_EQ(static_cast<double>(s.scale), ref.scale) << "run " << run << " step " << i;
      ASSERT_EQ(s.growth_tracker, ref.tracker) << "run " << run << " step " << i;
      ASSERT_EQ(s.hysteresis_tracker, ref.hysteresis_left) << "run " << run << " step " << i;
    }
  }
}

}  // namespace
}  // namespace mixprec::core
