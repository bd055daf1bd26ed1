// The CUDA fused optimizer kernels on a real device: SGD bit for bit and Adam(W) to rounding
// against the CPU kernels (the reference, tested against LibTorch in tests/torch/optim_test),
// across launch boundaries and unaligned views; a non-zero found_inf writes nothing, step counts
// included; and a whole fused step (check, update, scale update) captured in a CUDA graph and
// replayed equals the same step run eagerly. Without a CUDA device every test is skipped.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/cuda_util.h"
#include "mixprec/core/kernels.h"
#include "mixprec/core/optim_kernels.h"

namespace mixprec::core {
namespace {

using mixprec::testing::to_device;
using mixprec::testing::to_host;

constexpr int kBuffers = 5;  // param, grad, and up to three state buffers

template <typename T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;
}

// Host and device copies of one parameter's buffers. The device copies start `offset` elements
// into their allocation, so offset 1 gives views that are not vector-aligned.
template <typename T>
struct Param {
  std::vector<T> host[kBuffers];
  T* base[kBuffers] = {};
  std::int64_t offset = 0;
  std::int64_t* count = nullptr;

  std::int64_t numel() const { return static_cast<std::int64_t>(host[0].size()); }
  T* device(int b) const { return base[b] + offset; }
  TensorView host_view(int b) { return {host[b].data(), numel(), dtype_of<T>()}; }
  TensorView device_view(int b) const {
    return {device(b), numel(), dtype_of<T>(), {DeviceType::kCUDA, 0}};
  }
  std::vector<T> device_values(int b) const {
    return to_host(device(b), static_cast<std::size_t>(numel()));
  }
  void upload_grad() {
    ASSERT_EQ(
        cudaMemcpy(device(1), host[1].data(), sizeof(T) * host[1].size(), cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  void free() {
    for (T* p : base) cudaFree(p);
    cudaFree(count);
  }
};

template <typename T>
Param<T> make_param(std::int64_t n, std::int64_t offset, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  Param<T> p;
  p.offset = offset;
  for (int b = 0; b < kBuffers; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = normal(rng);
      // grads carry a scale of 1024; second moments are non-negative
      p.host[b].push_back(static_cast<T>(b == 1 ? 1024.0 * x : b >= 3 ? 0.01 * x * x : x));
    }
    std::vector<T> padded(static_cast<std::size_t>(offset), T(0));
    padded.insert(padded.end(), p.host[b].begin(), p.host[b].end());
    p.base[b] = to_device(padded);
  }
  p.count = to_device(std::vector<std::int64_t>{0});
  return p;
}

// New scaled gradients on host and device.
template <typename T>
void new_grads(std::vector<Param<T>>& params, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  for (auto& p : params) {
    for (auto& g : p.host[1]) g = static_cast<T>(1024.0 * normal(rng));
    p.upload_grad();
  }
}

// Sizes that cross the chunk (65536) and launch limits (48 tensors, 320 blocks per launch).
template <typename T>
std::vector<Param<T>> make_params(std::mt19937& rng) {
  std::vector<Param<T>> params;
  for (std::int64_t n : {1, 3, 65536, 65537, 300001}) params.push_back(make_param<T>(n, 0, rng));
  params.push_back(make_param<T>(70001, 1, rng));                                // unaligned
  for (int i = 0; i < 60; ++i) params.push_back(make_param<T>(17 + i, 0, rng));  // many small
  params.push_back(make_param<T>(25 * 65536 + 5, 0, rng));                       // over 320 blocks
  return params;
}

template <typename T>
void expect_equal_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

template <typename T>
void expect_close(const std::vector<T>& got, const std::vector<T>& want, double rel,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::max(1.0, std::abs(static_cast<double>(want[i])));
    ASSERT_NEAR(static_cast<double>(got[i]), static_cast<double>(want[i]), tol)
        << what << " element " << i;
  }
}

template <typename T>
void run_sgd_against_cpu(const SgdHyper& hyper) {
  std::mt19937 rng(5);
  auto params = make_params<T>(rng);
  const float scale = 1024.0f;
  float* scale_d = to_device(std::vector<float>{scale});
  float* found_d = to_device(std::vector<float>{0.0f});
  for (int step = 0; step < 3; ++step) {
    if (step > 0) new_grads(params, rng);
    std::vector<SgdTensors> cpu, gpu;
    for (auto& p : params) {
      cpu.push_back({p.host_view(0), p.host_view(1), p.host_view(2), step == 0});
      SgdTensors g{p.device_view(0), p.device_view(1), p.device_view(2)};
      g.step_count = p.count;
      gpu.push_back(g);
    }
    ASSERT_TRUE(fused_sgd_(cpu.data(), cpu.size(), hyper, &scale, nullptr));
    ASSERT_TRUE(fused_sgd_(gpu.data(), gpu.size(), hyper, scale_d, found_d));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto& p : params) {
    expect_equal_bits(p.device_values(0), p.host[0], "param");
    expect_equal_bits(p.device_values(1), p.host[1], "grad");
    if (hyper.momentum != 0.0) expect_equal_bits(p.device_values(2), p.host[2], "momentum");
    EXPECT_EQ(to_host(p.count, 1)[0], 3);
    p.free();
  }
  cudaFree(scale_d);
  cudaFree(found_d);
}

TEST(CudaFusedOptimTest, SgdMatchesTheCpuKernelBitForBit) {
  SKIP_WITHOUT_DEVICE();
  SgdHyper plain;
  plain.lr = 0.1;
  SgdHyper damped = plain;
  damped.momentum = 0.9;
  damped.dampening = 0.1;
  damped.weight_decay = 0.01;
  SgdHyper nesterov = plain;
  nesterov.momentum = 0.8;
  nesterov.nesterov = true;
  for (const SgdHyper& h : {plain, damped, nesterov}) {
    run_sgd_against_cpu<float>(h);
    run_sgd_against_cpu<double>(h);
  }
}

template <typename T>
void run_adam_against_cpu(const AdamHyper& hyper, double rel) {
  std::mt19937 rng(9);
  auto params = make_params<T>(rng);
  const float scale = 1024.0f;
  float* scale_d = to_device(std::vector<float>{scale});
  float* found_d = to_device(std::vector<float>{0.0f});
  for (int step = 1; step <= 3; ++step) {
    if (step > 1) new_grads(params, rng);
    std::vector<AdamTensors> cpu, gpu;
    for (auto& p : params) {
      AdamTensors c{p.host_view(0), p.host_view(1), p.host_view(2),
                    p.host_view(3), p.host_view(4), step};
      AdamTensors g{p.device_view(0), p.device_view(1), p.device_view(2), p.device_view(3),
                    p.device_view(4)};
      g.step_count = p.count;
      cpu.push_back(c);
      gpu.push_back(g);
    }
    ASSERT_TRUE(fused_adam_(cpu.data(), cpu.size(), hyper, &scale, nullptr));
    ASSERT_TRUE(fused_adam_(gpu.data(), gpu.size(), hyper, scale_d, found_d));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto& p : params) {
    expect_close(p.device_values(0), p.host[0], rel, "param");
    expect_equal_bits(p.device_values(1), p.host[1], "grad");  // one multiply: exact
    expect_close(p.device_values(2), p.host[2], rel, "exp_avg");
    expect_close(p.device_values(3), p.host[3], rel, "exp_avg_sq");
    if (hyper.amsgrad) expect_close(p.device_values(4), p.host[4], rel, "max_exp_avg_sq");
    EXPECT_EQ(to_host(p.count, 1)[0], 3);
    p.free();
  }
  cudaFree(scale_d);
  cudaFree(found_d);
}

TEST(CudaFusedOptimTest, AdamAndAdamWMatchTheCpuKernel) {
  SKIP_WITHOUT_DEVICE();
  AdamHyper adam;
  adam.lr = 0.01;
  adam.weight_decay = 0.1;
  AdamHyper adamw = adam;
  adamw.decoupled_weight_decay = true;
  adamw.amsgrad = true;
  for (const AdamHyper& h : {adam, adamw}) {
    // The bias corrections may differ in the last bit (device pow); a few ulp after 3 steps.
    run_adam_against_cpu<float>(h, 1e-6);
    run_adam_against_cpu<double>(h, 1e-14);
  }
}

TEST(CudaFusedOptimTest, ANonZeroFoundInfWritesNothingStepCountsIncluded) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(13);
  auto params = make_params<float>(rng);
  const float scale = 1024.0f;
  float* scale_d = to_device(std::vector<float>{scale});
  for (float found : {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()}) {
    float* found_d = to_device(std::vector<float>{found});
    std::vector<AdamTensors> adam;
    std::vector<SgdTensors> sgd;
    for (auto& p : params) {
      AdamTensors a{p.device_view(0), p.device_view(1), p.device_view(2), p.device_view(3),
                    p.device_view(4)};
      a.step_count = p.count;
      adam.push_back(a);
      SgdTensors s{p.device_view(0), p.device_view(1), p.device_view(2)};
      s.step_count = p.count;
      sgd.push_back(s);
    }
    AdamHyper ah;
    ah.amsgrad = true;
    SgdHyper sh;
    sh.lr = 0.1;
    sh.momentum = 0.9;
    ASSERT_TRUE(fused_adam_(adam.data(), adam.size(), ah, scale_d, found_d));
    ASSERT_TRUE(fused_sgd_(sgd.data(), sgd.size(), sh, scale_d, found_d));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (auto& p : params) {
      for (int b = 0; b < kBuffers; ++b) expect_equal_bits(p.device_values(b), p.host[b], "buf");
      EXPECT_EQ(to_host(p.count, 1)[0], 0);
    }
    cudaFree(found_d);
  }
  for (auto& p : params) p.free();
  cudaFree(scale_d);
}

// One fused iteration as GradScaler runs it: clear found_inf, check the still-scaled grads
// (inv_scale 1 writes nothing), fused Adam with grad_scale and found_inf, update the scale.
struct FusedStep {
  std::vector<AdamTensors> tensors;
  float *scale, *found, *one;
  std::int32_t* tracker;
  ScalePolicy policy;

  void run(cudaStream_t stream) const {
    ASSERT_EQ(cudaMemsetAsync(found, 0, sizeof(float), stream), cudaSuccess);
    std::vector<TensorView> grads;
    for (const auto& t : tensors) grads.push_back(t.grad);
    non_finite_check_and_unscale_(grads, found, one, stream);
    AdamHyper hyper;
    hyper.lr = 0.01;
    fused_adam_(tensors.data(), tensors.size(), hyper, scale, found, stream);
    update_scale_(scale, tracker, found, policy, {DeviceType::kCUDA, 0}, stream);
  }
};

TEST(CudaFusedOptimTest, AWholeFusedStepCapturedInAGraphReplaysAsTheEagerStep) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(21);
  std::mt19937 same(21);
  auto eager = make_params<float>(rng);
  auto graphed = make_params<float>(same);  // identical values
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const auto make_step = [](std::vector<Param<float>>& params) {
    FusedStep s;
    for (auto& p : params) {
      AdamTensors t{p.device_view(0), p.device_view(1), p.device_view(2), p.device_view(3),
                    p.device_view(4)};
      t.step_count = p.count;
      s.tensors.push_back(t);
    }
    s.scale = to_device(std::vector<float>{65536.0f});
    s.found = to_device(std::vector<float>{0.0f});
    s.one = to_device(std::vector<float>{1.0f});
    s.tracker = to_device(std::vector<std::int32_t>{0});
    s.policy.growth_interval = 2;
    return s;
  };
  const FusedStep eager_step = make_step(eager);
  const FusedStep graph_step = make_step(graphed);

  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  graph_step.run(stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // Capturing launched nothing: the parameters are untouched so far.
  expect_equal_bits(graphed[0].device_values(0), eager[0].device_values(0), "param");

  std::mt19937 grads_rng(4);
  for (int step = 0; step < 4; ++step) {
    // New grads in both copies; step 1 carries an inf, which must skip and halve the scale.
    std::normal_distribution<float> normal;
    for (std::size_t i = 0; i < eager.size(); ++i) {
      for (auto& g : eager[i].host[1]) g = 1024.0f * normal(grads_rng);
      if (step == 1 && i == 3) eager[i].host[1][7] = std::numeric_limits<float>::infinity();
      graphed[i].host[1] = eager[i].host[1];
      eager[i].upload_grad();
      graphed[i].upload_grad();
    }
    eager_step.run(stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  for (std::size_t i = 0; i < eager.size(); ++i) {
    for (int b = 0; b < 4; ++b) {
      expect_equal_bits(graphed[i].device_values(b), eager[i].device_values(b), "replayed");
    }
    EXPECT_EQ(to_host(graphed[i].count, 1)[0], 3);  // 4 steps, one skipped
  }
  // 65536, growth every 2 clean steps: clean -> inf (32768) -> clean -> clean (65536).
  EXPECT_EQ(to_host(graph_step.scale, 1)[0], 65536.0f);
  EXPECT_EQ(to_host(graph_step.scale, 1)[0], to_host(eager_step.scale, 1)[0]);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  for (auto* params : {&eager, &graphed}) {
    for (auto& p : *params) p.free();
  }
  for (const FusedStep* s : {&eager_step, &graph_step}) {
    cudaFree(s->scale);
    cudaFree(s->found);
    cudaFree(s->one);
    cudaFree(s->tracker);
  }
}

}  // namespace
}  // namespace mixprec::core
