// mixprec::AutocastGuard: enter/exit of LibTorch's autocast state as Python's torch.autocast.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <stdexcept>

#include "mixprec/mixprec.h"
#include "torch/test_util.h"

namespace mixprec {
namespace {

TEST(AutocastGuardTest, CpuBFloat16IsOnInsideAndRestoredAfter) {
  ASSERT_FALSE(at::autocast::is_cpu_enabled());
  const auto a = torch::randn({4, 4});
  {
    AutocastGuard guard(torch::kCPU);
    EXPECT_TRUE(guard.enabled());
    EXPECT_EQ(guard.dtype(), torch::kBFloat16);
    EXPECT_TRUE(at::autocast::is_cpu_enabled());
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);  // mm autocasts to bf16 on CPU
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
}

TEST(AutocastGuardTest, NestedGuardsRestoreTheOuterState) {
  {
    AutocastGuard outer(torch::kCPU);
    {
      AutocastGuard inner(torch::kCPU, c10::nullopt, /*enabled=*/false);
      EXPECT_FALSE(at::autocast::is_cpu_enabled());
    }
    EXPECT_TRUE(at::autocast::is_cpu_enabled());
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
}

TEST(AutocastGuardTest, RestoresStateDuringUnwinding) {
  const bool cache_before = at::autocast::is_autocast_cache_enabled();
  try {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16, true, /*cache_enabled=*/!cache_before);
    EXPECT_EQ(at::autocast::is_autocast_cache_enabled(), !cache_before);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(at::autocast::is_autocast_cache_enabled(), cache_before);
}

TEST(AutocastGuardTest, UnsupportedCombinationsThrowBeforeChangingState) {
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 2)
  EXPECT_THROW_WITH(AutocastGuard(torch::kCPU, torch::kHalf), "CPU autocast supports only torch.bfloat16");
#endif
  EXPECT_THROW_WITH(AutocastGuard(torch::kCPU, torch::kFloat), "CPU autocast supports");
  EXPECT_THROW_WITH(AutocastGuard(torch::kCUDA, torch::kDouble), "CUDA autocast supports");
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(at::autocast::get_autocast_cpu_dtype(), torch::kBFloat16);
}

TEST(AutocastGuardTest, CudaWithoutADeviceRunsTheRegionWithoutAutocast) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  AutocastGuard guard(torch::kCUDA);
  EXPECT_FALSE(guard.enabled());
  EXPECT_FALSE(at::autocast::is_enabled());
}

}  // namespace
}  // namespace mixprec
