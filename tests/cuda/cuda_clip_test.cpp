// The CUDA clipping kernels on a GPU (src/cuda/clip.cu) against the CPU kernels: the norm with its
// inf check over many tensors and launches, the unscale-and-clip multiply bit for bit, and a fused
// AdamW step with a clip coefficient. Without a CUDA device every test is skipped (GTEST_SKIP);
// tests/cuda/clip_element_test.cpp checks the same kernel bodies on the host.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_util.h"
#include "mixprec/core/clip_kernels.h"
#include "mixprec/core/optim_kernels.h"

namespace mixprec::core {
namespace {

using testing::to_device;
using testing::to_host;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = 1000.0f * normal(rng);
  return v;
}

TEST(CudaClipTest, NormAndCheckMatchTheCpuKernelAcrossLaunches) {
  SKIP_WITHOUT_DEVICE();
  // 100 tensors (more than one launch holds) of varied sizes, one of several chunks.
  std::vector<std::vector<float>> host;
  for (int i = 0; i < 100; ++i) host.push_back(random_floats(i == 7 ? 300001 : 1 + 97 * i, i));
  std::vector<TensorView> cpu, gpu;
  std::vector<float*> device;
  for (auto& h : host) {
    cpu.push_back({h.data(), static_cast<std::int64_t>(h.size())});
    device.push_back(to_device(h));
    gpu.push_back({device.back(), static_cast<std::int64_t>(h.size()), DType::kFloat32,
                   {DeviceType::kCUDA, 0}});
  }
  const float inv = 1.0f / 1000.0f;
  float* d_inv = to_device(std::vector<float>{inv});
  float* d_found = to_device(std::vector<float>{0.0f});
  double* d_out = to_device(std::vector<double>{-1.0});
  double* d_per_view = to_device(std::vector<double>(host.size(), -1.0));
  for (NormKind kind : {NormKind::kTwo, NormKind::kInf}) {
    double want = 0.0;
    std::vector<double> per_view(host.size());
    grad_norm_(cpu.data(), cpu.size(), kind, &inv, &want, nullptr, per_view.data());
    grad_norm_(gpu.data(), gpu.size(), kind, d_inv, d_out, d_found, d_per_view);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const double got = to_host(d_out, 1)[0];
    if (kind == NormKind::kInf) {
      EXPECT_EQ(got, want);
    } else {
      EXPECT_NEAR(got, want, 1e-13 * want);
    }
    const std::vector<double> got_views = to_host(d_per_view, host.size());
    for (std::size_t i = 0; i < host.size(); ++i) {
      EXPECT_NEAR(got_views[i], per_view[i], 1e-13 * per_view[i]) << "view " << i;
    }
    EXPECT_EQ(to_host(d_found, 1)[0], 0.0f);
  }
  // The clip, bit for bit with the CPU's; the host copies are clipped by the CPU kernel.
  const float coef = 0.3712f;
  float* d_coef = to_device(std::vector<float>{coef});
  unscale_and_clip_(gpu.data(), gpu.size(), d_inv, d_coef);
  unscale_and_clip_(cpu.data(), cpu.size(), &inv, &coef);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (std::size_t i = 0; i < host.size(); ++i) {
    const std::vector<float> back = to_host(device[i], host[i].size());
    EXPECT_EQ(std::memcmp(back.data(), host[i].data(), back.size() * 4), 0) << "tensor " << i;
  }
  for (float* p : device) cudaFree(p);
  cudaFree(d_inv);
  cudaFree(d_found);
  cudaFree(d_out);
  cudaFree(d_per_view);
  cudaFree(d_coef);
}

TEST(CudaClipTest, FusedAdamTakesTheCoefficientOnTheDevice) {
  SKIP_WITHOUT_DEVICE();
  const std::size_t n = 70001;
  const std::vector<float> p = random_floats(n, 1), g = random_floats(n, 2);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  const float scale = 1000.0f, found = 0.0f, coef = 0.4375123f;
  AdamHyper h;
  h.lr = 0.01;
  h.weight_decay = 0.1;
  h.decoupled_weight_decay = true;
  std::vector<float> cp = p, cg = g, cm = m, cv = v;
  AdamTensors t{{cp.data(), static_cast<std::int64_t>(n)}, {cg.data(), static_cast<std::int64_t>(n)},
                {cm.data(), static_cast<std::int64_t>(n)}, {cv.data(), static_cast<std::int64_t>(n)},
                {}, 1};
  ASSERT_TRUE(fused_adam_(&t, 1, h, &scale, &found, nullptr, &coef));
  float *dp = to_device(p), *dg = to_device(g), *dm = to_device(m), *dv = to_device(v);
  float* d_scale = to_device(std::vector<float>{scale});
  float* d_found = to_device(std::vector<float>{found});
  float* d_coef = to_device(std::vector<float>{coef});
  std::int64_t* d_count = to_device(std::vector<std::int64_t>{0});
  const Device cuda{DeviceType::kCUDA, 0};
  const auto n64 = static_cast<std::int64_t>(n);
  AdamTensors dt{{dp, n64, DType::kFloat32, cuda}, {dg, n64, DType::kFloat32, cuda},
                 {dm, n64, DType::kFloat32, cuda}, {dv, n64, DType::kFloat32, cuda},
                 {nullptr, 0, DType::kFloat32, cuda}, 1, d_count};
  ASSERT_TRUE(fused_adam_(&dt, 1, h, d_scale, d_found, nullptr, d_coef));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // The clipped grads are bit for bit; the update to the last bits of the device's pow().
  const std::vector<float> back_g = to_host(dg, n), back_p = to_host(dp, n);
  EXPECT_EQ(std::memcmp(back_g.data(), cg.data(), n * 4), 0);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(back_p[i], cp[i], 1e-6f * std::fabs(cp[i]) + 1e-7f) << i;
  }
  EXPECT_EQ(to_host(d_count, 1)[0], 1);
  for (void* q : {static_cast<void*>(dp), static_cast<void*>(dg), static_cast<void*>(dm),
                  static_cast<void*>(dv), static_cast<void*>(d_scale), static_cast<void*>(d_found),
                  static_cast<void*>(d_coef), static_cast<void*>(d_count)}) {
    cudaFree(q);
  }
}

}  // namespace
}  // namespace mixprec::core
