// mixprec::AutocastGuard: enter/exit of LibTorch's autocast state as Python's torch.autocast.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <ATen/autocast_mode.h>
#include <stdexcept>

#include "mixprec/mixprec.h"
#include "torch/test_util.h"

namespace mixprec {
namespace {

// LibTorch's autocast state, under the names of the LibTorch at hand (2.4 took a DeviceType).
#if MIXPREC_TORCH_DEVICE_AUTOCAST_API
bool cpu_enabled() { return at::autocast::is_autocast_enabled(at::kCPU); }
c10::ScalarType cpu_dtype() { return at::autocast::get_autocast_dtype(at::kCPU); }
bool cuda_enabled() { return at::autocast::is_autocast_enabled(at::kCUDA); }
#else
bool cpu_enabled() { return at::autocast::is_cpu_enabled(); }
c10::ScalarType cpu_dtype() { return at::autocast::get_autocast_cpu_dtype(); }
bool cuda_enabled() { return at::autocast::is_enabled(); }
#endif
constexpr bool kCpuHalf = MIXPREC_TORCH_CPU_FP16_AUTOCAST;

TEST(AutocastGuardTest, CpuBFloat16IsOnInsideAndRestoredAfter) {
  ASSERT_FALSE(cpu_enabled());
  const auto a = torch::randn({4, 4});
  {
    AutocastGuard guard(torch::kCPU);
    EXPECT_TRUE(guard.enabled());
    EXPECT_EQ(guard.dtype(), torch::kBFloat16);
    EXPECT_TRUE(cpu_enabled());
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);  // mm autocasts to bf16 on CPU
  }
  EXPECT_FALSE(cpu_enabled());
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
}

TEST(AutocastGuardTest, NestedGuardsRestoreTheOuterState) {
  {
    AutocastGuard outer(torch::kCPU);
    {
      AutocastGuard inner(torch::kCPU, c10::nullopt, /*enabled=*/false);
      EXPECT_FALSE(cpu_enabled());
    }
    EXPECT_TRUE(cpu_enabled());
  }
  EXPECT_FALSE(cpu_enabled());
}

TEST(AutocastGuardTest, RestoresStateDuringUnwinding) {
  const bool cache_before = at::autocast::is_autocast_cache_enabled();
  try {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16, true, /*cache_enabled=*/!cache_before);
    EXPECT_EQ(at::autocast::is_autocast_cache_enabled(), !cache_before);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(cpu_enabled());
  EXPECT_EQ(at::autocast::is_autocast_cache_enabled(), cache_before);
}

TEST(AutocastGuardTest, UnsupportedCombinationsThrowBeforeChangingState) {
#if !MIXPREC_TORCH_CPU_FP16_AUTOCAST
  EXPECT_THROW_WITH(AutocastGuard(torch::kCPU, torch::kHalf), "CPU autocast supports only torch.bfloat16");
#endif
  EXPECT_THROW_WITH(AutocastGuard(torch::kCPU, torch::kFloat), "CPU autocast supports");
  EXPECT_THROW_WITH(AutocastGuard(torch::kCUDA, torch::kDouble), "CUDA autocast supports");
  EXPECT_FALSE(cpu_enabled());
  EXPECT_EQ(cpu_dtype(), torch::kBFloat16);
}

TEST(AutocastGuardTest, CpuFloat16WhereLibTorchHasIt) {
  // What the demo and seed example 3 rely on: is_supported() says whether the CPU takes fp16,
  // and where it does, a matmul under the guard runs in fp16 and its gradients flow back in fp32.
  EXPECT_EQ(AutocastGuard::is_supported(torch::kCPU, torch::kHalf), kCpuHalf);
  EXPECT_TRUE(AutocastGuard::is_supported(torch::kCPU, torch::kBFloat16));
  EXPECT_TRUE(AutocastGuard::is_supported(torch::kCUDA, torch::kHalf));
  EXPECT_FALSE(AutocastGuard::is_supported(torch::kCPU, torch::kFloat));
  if (!kCpuHalf) GTEST_SKIP() << "LibTorch " TORCH_VERSION " has no fp16 autocast on the CPU";
  const auto w = torch::randn({4, 4}, torch::requires_grad());
  torch::Tensor out;
  {
    AutocastGuard guard(torch::kCPU, torch::kHalf);
    out = torch::mm(torch::randn({2, 4}), w);
    EXPECT_EQ(out.scalar_type(), torch::kHalf);
  }
  out.sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
}

TEST(AutocastGuardTest, CudaWithoutADeviceRunsTheRegionWithoutAutocast) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  AutocastGuard guard(torch::kCUDA);
  EXPECT_FALSE(guard.enabled());
  EXPECT_FALSE(cuda_enabled());
}

}  // namespace
}  // namespace mixprec
