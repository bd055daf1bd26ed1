// The CUDA kernels of the core on a real device: the multi-tensor unscale-and-check against the
// scalar reference, across launch boundaries, and the one-thread update kernel against the rule.
// Without a CUDA device every test is skipped (GTEST_SKIP), never failed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/reference.h"
#include "cuda/cuda_util.h"
#include "cuda/kernels.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {
namespace {

using mixprec::testing::to_device;
using mixprec::testing::to_host;

TEST(CudaKernelsTest, UnscaleMatchesReferenceAcrossManyTensorsAndLaunches) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(3);
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  for (int inject : {-1, 0, 77, 149}) {
    // 150 tensors (more than one launch holds) with sizes around the 64K chunk.
    std::vector<std::vector<std::uint64_t>> values(150);
    std::vector<TensorView> views;
    std::vector<void*> device;
    for (std::size_t t = 0; t < values.size(); ++t) {
      const DType dtype = dtypes[t % 4];
      const std::int64_t n = static_cast<std::int64_t>(rng() % 3) * 65536 + rng() % 70000;
      values[t].resize(static_cast<std::size_t>(n));
      for (auto& v : values[t]) {
        const float f = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 7.0f;
        v = dtype == DType::kFloat32   ? testing::bits32(f)
            : dtype == DType::kFloat64 ? testing::bits64(f)
            : dtype == DType::kFloat16 ? testing::float_to_half_ref(f)
                                       : testing::float_to_bf16_ref(f);
      }
      if (static_cast<int>(t) == inject && n > 0) {
        const std::uint64_t inf_bits[] = {0x7f800000u, 0x7ff0000000000000ull, 0x7c00u, 0x7f80u};
        values[t][static_cast<std::size_t>(n - 1)] = inf_bits[t % 4];
      }
      std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * element_size(dtype));
      for (std::int64_t i = 0; i < n; ++i) {
        std::memcpy(bytes.data() + i * element_size(dtype), &values[t][static_cast<std::size_t>(i)],
                    element_size(dtype));
      }
      device.push_back(to_device(bytes));
      views.push_back({device.back(), n, dtype, {DeviceType::kCUDA, 0}});
    }
    float* found = to_device(std::vector<float>{0.0f});
    const float inv_host = 0.25f;
    float* inv = to_device(std::vector<float>{inv_host});
    non_finite_check_and_unscale_(views, found, inv);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(to_host(found, 1)[0], inject >= 0 ? 1.0f : 0.0f);
    for (std::size_t t = 0; t < views.size(); ++t) {
      const std::size_t size = element_size(views[t].dtype);
      const auto bytes = to_host(static_cast<unsigned char*>(device[t]),
                                 static_cast<std::size_t>(views[t].numel) * size);
      for (std::int64_t i = 0; i < views[t].numel; ++i) {
        std::uint64_t got = 0;
        std::memcpy(&got, bytes.data() + i * size, size);
        const std::uint64_t want = testing::reference_unscaled(
            views[t].dtype, values[t][static_cast<std::size_t>(i)], inv_host);
        if (testing::reference_isnan(views[t].dtype, want)) {
          ASSERT_TRUE(testing::reference_isnan(views[t].dtype, got));
        } else {
          ASSERT_EQ(got, want) << "tensor " << t << " element " << i;
        }
      }
      cudaFree(device[t]);
    }
    cudaFree(found);
    cudaFree(inv);
  }
}

TEST(CudaKernelsTest, UpdateKernelRunsTheRule) {
  SKIP_WITHOUT_DEVICE();
  ScalePolicy p;
  p.growth_interval = 2;
  p.hysteresis = 2;
  float* scale = to_device(std::vector<float>{16.0f});
  std::int32_t* tracker = to_device(std::vector<std::int32_t>{0});
  std::vector<std::int64_t> init(kNumCounters);
  init_counters(init.data(), p.hysteresis);
  std::int64_t* counters = to_device(init);
  ScaleState expected{16.0f, 0, 2};
  for (float f : {0.0f, 0.0f, 1.0f, 1.0f, 0.0f}) {
    float* found = to_device(std::vector<float>{f});
    update_scale_(scale, tracker, found, p, {DeviceType::kCUDA, 0}, nullptr, counters);
    expected = next_scale_state(expected, f, p);
    cudaFree(found);
  }
  EXPECT_EQ(to_host(scale, 1)[0], expected.scale);
  EXPECT_EQ(to_host(tracker, 1)[0], expected.growth_tracker);
  EXPECT_EQ(to_host(counters, kNumCounters)[kCounterHysteresis], expected.hysteresis_tracker);
  cudaFree(scale);
  cudaFree(tracker);
  cudaFree(counters);
}

}  // namespace
}  // namespace mixprec::core
