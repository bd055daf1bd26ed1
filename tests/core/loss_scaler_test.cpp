// LossScaler, the raw-buffer scaler of the core: options, skip decision, accumulation, errors.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "message_of.h"
#include "mixprec/core/error.h"
#include "mixprec/core/loss_scaler.h"

namespace mixprec::core {
namespace {

LossScalerOptions options(double init, double growth, double backoff, std::int64_t interval) {
  LossScalerOptions o;
  o.init_scale = init;
  o.policy.growth_factor = growth;
  o.policy.backoff_factor = backoff;
  o.policy.growth_interval = interval;
  return o;
}

std::string error_of(const LossScalerOptions& o) {
  return test::message_of([&] { LossScaler s(o); }).value_or("");
}

TEST(LossScalerTest, InvalidOptionsNameTheOptionAndValue) {
  EXPECT_NE(error_of(options(0.0, 2, 0.5, 10)).find("init_scale must be finite and > 0, got 0"),
            std::string::npos);
  EXPECT_NE(error_of(options(std::numeric_limits<double>::infinity(), 2, 0.5, 10)).find("init_scale"),
            std::string::npos);
  EXPECT_NE(error_of(options(1e39, 2, 0.5, 10)).find("float32"), std::string::npos);
  EXPECT_NE(error_of(options(1, 0.5, 0.5, 10)).find("growth_factor must be > 1.0, got 0.5"),
            std::string::npos);
  EXPECT_NE(error_of(options(1, 2, 1.0, 10)).find("backoff_factor must be in (0, 1), got 1"),
            std::string::npos);
  EXPECT_NE(error_of(options(1, 2, 0.0, 10)).find("backoff_factor"), std::string::npos);
  EXPECT_NE(error_of(options(1, 2, 0.5, 0)).find("growth_interval must be >= 1, got 0"),
            std::string::npos);
  EXPECT_EQ(error_of(options(1, 2, 0.5, 1)), "");
}

TEST(LossScalerTest, ScalesTheLossByTheCurrentScale) {
  LossScaler s(options(1024.0, 2, 0.5, 2000));
  EXPECT_EQ(s.scale(0.5), 512.0);
  EXPECT_EQ(s.get_scale(), 1024.0);
}

TEST(LossScalerTest, CleanGradsAreUnscaledAndStepIsAllowed) {
  LossScaler s(options(4.0, 2, 0.5, 2));
  std::vector<float> g = {8.0f, -4.0f, 2.0f};
  EXPECT_TRUE(s.unscale_({{g.data(), 3}}));
  EXPECT_EQ(g, (std::vector<float>{2.0f, -1.0f, 0.5f}));
  s.update();
  EXPECT_EQ(s.growth_tracker(), 1);
  EXPECT_TRUE(s.unscale_({{g.data(), 3}}));
  s.update();
  EXPECT_EQ(s.get_scale(), 8.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScalerTest, OverflowSkipsAndBacksOffOnceEvenOverSeveralCalls) {
  LossScaler s(options(4.0, 2, 0.5, 2));
  std::vector<float> clean = {1.0f};
  std::vector<float> bad = {std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(s.unscale_({{bad.data(), 1}}));
  EXPECT_TRUE(s.unscale_({{clean.data(), 1}}));  // this call's grads are clean...
  s.update();                                     // ...but the iteration overflowed
  EXPECT_EQ(s.get_scale(), 2.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

// The hysteresis tracker starts full, as GradScaler's does: with hysteresis 2 the first overflow
// is tolerated (skipped, no backoff) and the second backs off.
TEST(LossScalerTest, HysteresisToleratesTheFirstOverflowsFromTheStart) {
  LossScalerOptions o = options(4.0, 2, 0.5, 100);
  o.policy.hysteresis = 2;
  LossScaler s(o);
  std::vector<float> bad = {std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(s.unscale_({{bad.data(), 1}}));
  s.update();
  EXPECT_EQ(s.get_scale(), 4.0) << "the first overflow backed off despite hysteresis 2";
  EXPECT_FALSE(s.unscale_({{bad.data(), 1}}));
  s.update();
  EXPECT_EQ(s.get_scale(), 2.0);
}

TEST(LossScalerTest, UpdateWithoutUnscaleIsAnError) {
  LossScaler s;
  try {
    s.update();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No inf checks were recorded prior to update."),
              std::string::npos);
  }
}

TEST(LossScalerTest, RejectsCudaBuffers) {
  LossScaler s;
  float x = 0.0f;
  EXPECT_THROW(s.unscale_({{&x, 1, DType::kFloat32, {DeviceType::kCUDA, 0}}}), Error);
}

}  // namespace
}  // namespace mixprec::core
