// The fused optimizer kernels give bit-identical results for every thread count, and skip on
// any non-zero found_inf (core level; the LibTorch adapters are tested in tests/torch/optim_test).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "mixprec/core/kernels.h"
#include "mixprec/core/optim_kernels.h"

namespace mixprec::core {
namespace {

struct AdamBuffers {
  std::vector<float> param, grad, m, v, vmax;
};

// Several parameters, one large enough to be split across threads.
std::vector<AdamBuffers> make_params() {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  std::vector<AdamBuffers> out;
  for (std::size_t n : {std::size_t{3}, std::size_t{1000}, std::size_t{700001}}) {
    AdamBuffers b;
    for (std::size_t i = 0; i < n; ++i) {
      b.param.push_back(normal(rng));
      b.grad.push_back(1024.0f * normal(rng));
      b.m.push_back(0.1f * normal(rng));
      b.v.push_back(std::abs(0.01f * normal(rng)));
      b.vmax.push_back(b.v.back());
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<AdamTensors> views_of(std::vector<AdamBuffers>& buffers) {
  std::vector<AdamTensors> t;
  for (auto& b : buffers) {
    const auto n = static_cast<std::int64_t>(b.param.size());
    t.push_back({{b.param.data(), n}, {b.grad.data(), n}, {b.m.data(), n}, {b.v.data(), n},
                 {b.vmax.data(), n}, 3});
  }
  return t;
}

TEST(FusedOptimThreadsTest, AdamResultsDoNotDependOnTheThreadCount) {
  AdamHyper hyper;
  hyper.lr = 0.01;
  hyper.weight_decay = 0.1;
  hyper.amsgrad = true;
  hyper.decoupled_weight_decay = true;
  const float scale = 1024.0f, found = 0.0f;
  std::vector<std::vector<AdamBuffers>> results;
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    auto buffers = make_params();
    const auto views = views_of(buffers);
    ASSERT_TRUE(fused_adam_(views.data(), views.size(), hyper, &scale, &found));
    results.push_back(std::move(buffers));
  }
  set_num_threads(0);
  for (std::size_t r = 1; r < results.size(); ++r) {
    for (std::size_t p = 0; p < results[0].size(); ++p) {
      EXPECT_EQ(results[r][p].param, results[0][p].param) << "threads run " << r << " param " << p;
      EXPECT_EQ(results[r][p].m, results[0][p].m);
      EXPECT_EQ(results[r][p].v, results[0][p].v);
      EXPECT_EQ(results[r][p].vmax, results[0][p].vmax);
      EXPECT_EQ(results[r][p].grad, results[0][p].grad);
    }
  }
  // And the update really happened (so the comparison above is not of untouched buffers).
  EXPECT_NE(results[0][2].param, make_params()[2].param);
}

TEST(FusedOptimThreadsTest, AnyNonZeroFoundInfSkipsWithoutWriting) {
  for (float found : {1.0f, 2.0f, -1.0f}) {
    auto buffers = make_params();
    const auto before = make_params();
    const auto views = views_of(buffers);
    const float scale = 1024.0f;
    EXPECT_FALSE(fused_adam_(views.data(), views.size(), AdamHyper{}, &scale, &found));
    for (std::size_t p = 0; p < buffers.size(); ++p) {
      EXPECT_EQ(buffers[p].param, before[p].param);
      EXPECT_EQ(buffers[p].grad, before[p].grad);
      EXPECT_EQ(buffers[p].m, before[p].m);
    }
  }
}

}  // namespace
}  // namespace mixprec::core
