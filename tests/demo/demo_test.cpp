// Checks what mixprec_demo claims, from the summary.csv its CTest fixture run wrote (300 steps,
// seed 0): fp16 without loss scaling loses gradients to zero and trains worse; with the scaler it
// keeps them and tracks fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Row {
  double final_loss = NAN;
  double skipped_steps = NAN;
  double final_scale = NAN;
  double flushed_share = NAN;
  double nonzero = NAN;
};

// summary.csv: run,final_loss,skipped_steps,final_scale,flushed_share,flushed,nonzero,overflowed
std::map<std::string, Row> read_summary(const std::string& path) {
  std::map<std::string, Row> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::stringstream cells(line);
    std::string cell;
    std::vector<std::string> c;
    while (std::getline(cells, cell, ',')) c.push_back(cell);
    if (c.size() != 8) continue;
    Row r;
    r.final_loss = std::stod(c[1]);
    r.skipped_steps = std::stod(c[2]);
    r.final_scale = std::stod(c[3]);
    r.flushed_share = std::stod(c[4]);
    r.nonzero = std::stod(c[6]);
    rows[c[0]] = r;
  }
  return rows;
}

class DemoSummaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rows_ = read_summary(std::string(MIXPREC_DEMO_TEST_OUT) + "/summary.csv");
    ASSERT_EQ(rows_.size(), 3u) << "summary.csv missing or incomplete in " MIXPREC_DEMO_TEST_OUT
                                   " (did the mixprec_demo_run fixture run?)";
    ASSERT_EQ(rows_.count("fp32"), 1u);
    ASSERT_EQ(rows_.count("fp16"), 1u);
    ASSERT_EQ(rows_.count("fp16_scaled"), 1u);
  }
  const Row& fp32() { return rows_["fp32"]; }
  const Row& fp16() { return rows_["fp16"]; }
  const Row& scaled() { return rows_["fp16_scaled"]; }
  std::map<std::string, Row> rows_;
};

TEST_F(DemoSummaryTest, AllRunsFinishWithFiniteLoss) {
  for (const auto& [name, r] : rows_) {
    EXPECT_TRUE(std::isfinite(r.final_loss)) << name;
    EXPECT_GT(r.final_loss, 0.0) << name;
  }
}

TEST_F(DemoSummaryTest, Fp16WithoutScalingFlushesFarMoreGradientsThanWithScaler) {
  if (std::isnan(fp16().flushed_share)) {
    GTEST_SKIP() << "the demo ran real fp16 on CUDA, where the flushed share is not measured";
  }
  ASSERT_GT(fp16().nonzero, 0) << "the fp16 run measured no gradients";
  ASSERT_GT(scaled().nonzero, 0) << "the scaled run measured no gradients";
  // Unscaled, most non-zero gradient elements fall below fp16's range (the demo shows ~84%)...
  EXPECT_GT(fp16().flushed_share, 0.5);
  // ...and the scaler keeps nearly all of them (~0.03%; at least 10x fewer flushed).
  EXPECT_LT(scaled().flushed_share, 0.01);
  EXPECT_GT(fp16().flushed_share, 10.0 * scaled().flushed_share);
}

TEST_F(DemoSummaryTest, Fp16WithoutScalingTrainsWorseThanFp32) {
  // At least 2x the fp32 loss (the demo shows ~4.9x): lost gradients stall the hidden layers.
  EXPECT_GT(fp16().final_loss, 2.0 * fp32().final_loss)
      << "fp16 " << fp16().final_loss << " vs fp32 " << fp32().final_loss;
}

TEST_F(DemoSummaryTest, Fp16WithGradScalerTracksFp32) {
  // Within 5% of the fp32 loss (the demo shows < 0.1%): fp16 rounding of the values stays, the
  // lost gradients do not.
  EXPECT_LT(std::abs(scaled().final_loss / fp32().final_loss - 1.0), 0.05)
      << "scaled " << scaled().final_loss << " vs fp32 " << fp32().final_loss;
}

TEST_F(DemoSummaryTest, ScalesAreWhereTheyShouldBe) {
  EXPECT_EQ(fp32().final_scale, 1.0);
  EXPECT_EQ(fp16().final_scale, 1.0);
  EXPECT_EQ(fp32().skipped_steps, 0);
  EXPECT_EQ(fp16().skipped_steps, 0);
  // A power of two that the dynamic scaler reached (> 1: scaling actually happened).
  const double log2_scale = std::log2(scaled().final_scale);
  EXPECT_GT(scaled().final_scale, 1.0);
  EXPECT_EQ(log2_scale, std::round(log2_scale));
}

TEST_F(DemoSummaryTest, OverflowsAreSkippedAndBackedOff) {
  // growth_interval 10 (see CMakeLists.txt) lifts the scale past fp16's ceiling within 300 steps:
  // the scaler must skip those steps and halve the scale at each, and the log must agree.
  EXPECT_GT(scaled().skipped_steps, 0) << "the scaled run never overflowed";
  std::ifstream log(std::string(MIXPREC_DEMO_TEST_OUT) + "/log.csv");
  ASSERT_TRUE(log) << "log.csv missing";
  std::string line;
  std::getline(log, line);  // header: step,run,loss,scale,skipped,flushed_share
  double previous_scale = 65536;  // init_scale
  int skipped = 0;
  while (std::getline(log, line)) {
    std::vector<std::string> c;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) c.push_back(cell);
    ASSERT_EQ(c.size(), 6u) << line;
    if (c[1] != "fp16_scaled") continue;
    const double scale = std::stod(c[3]);
    if (c[4] == "1") {
      ++skipped;
      EXPECT_EQ(scale, previous_scale / 2) << "skipped step " << c[0] << " did not back off";
    }
    previous_scale = scale;
  }
  EXPECT_EQ(skipped, scaled().skipped_steps);
}

TEST_F(DemoSummaryTest, WritesTheStepLog) {
  std::ifstream log(std::string(MIXPREC_DEMO_TEST_OUT) + "/log.csv");
  ASSERT_TRUE(log) << "log.csv missing";
  std::string header;
  std::getline(log, header);
  EXPECT_EQ(header, "step,run,loss,scale,skipped,flushed_share");
  int rows = 0;
  for (std::string line; std::getline(log, line);) ++rows;
  EXPECT_EQ(rows, 3 * 300);  // 3 runs x --steps 300 (see CMakeLists.txt)
}

}  // namespace
