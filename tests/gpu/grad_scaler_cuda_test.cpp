// GradScaler, the AMP kernels and the fused optimizers on a real GPU (label `gpu`):
//  (a) the scale lives on the grads' device, and CUDA results equal a float32 run on the CPU;
//  (b) a whole fused iteration under SyncDebugMode::L_ERROR makes no host sync, and an injected
//      inf really skips (parameters and moments unchanged, scale halved);
//  (c) the iteration captured in a CUDA graph and replayed equals the same iterations run eagerly;
//  (d) two GPUs: an inf on cuda:1 only skips the step on both, with one found_inf per device;
//  (e) grads on the CPU and on CUDA, the scale on either: an overflow on either side skips.
// Every test is skipped (GTEST_SKIP), never failed, without a CUDA device; (d) needs two.
// Expected values come from an independent computation (ATen on the CPU, an eager run, or the
// documented rule), never from the code under test itself.
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"

namespace mixprec_gpu_test {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

const torch::Device kCuda(torch::kCUDA, 0);
const OptKind kAllOptimizers[] = {OptKind::kTorchSgd, OptKind::kFusedSgd, OptKind::kFusedAdamW};
const OptKind kFusedOptimizers[] = {OptKind::kFusedSgd, OptKind::kFusedAdamW};

mixprec::GradScalerOptions small_scaler_options() {
  // Small init scale and interval: growth and backoff both happen within a dozen steps.
  return mixprec::GradScalerOptions().init_scale(1024.0).growth_interval(3);
}

// ---------------------------------------------------------------------------------------------
// (a) device placement and CPU equivalence

TEST(GpuGradScaler, ScaleAndTrackerLiveOnTheGradsDevice) {
  SKIP_WITHOUT_CUDA();
  torch::nn::Sequential net = make_mlp(kCuda);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
  mixprec::GradScaler scaler;
  const Batches b = make_batches(1, {}).to(kCuda);
  iteration(net, opt, scaler, b.x[0], b.y[0], /*autocast=*/true);
  const Tensor scale = scaler.get_scale_async();
  ASSERT_TRUE(scale.defined());
  EXPECT_EQ(scale.device(), kCuda);
  EXPECT_EQ(scale.scalar_type(), torch::kFloat);
  for (const Tensor& p : net->parameters()) EXPECT_EQ(p.grad().device(), scale.device());
  EXPECT_EQ(scaler.get_scale(), 65536.0);  // one clean step: no change (interval 2000)
  EXPECT_EQ(scaler.get_growth_tracker(), 1);
}

// The kernel on fp16/bf16/fp32 CUDA lists against ATen float32 arithmetic on the CPU: scaling in
// float32 and rounding once to the storage type, as torch._amp_foreach_non_finite_check_and_unscale_.
TEST(GpuGradScaler, UnscaleOnCudaEqualsCpuFloat32Arithmetic) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(3);
  for (torch::Dtype dtype : {torch::kHalf, torch::kBFloat16, torch::kFloat}) {
    for (double inv : {1.0 / 1024.0, 1.0 / 3.0}) {
      std::vector<Tensor> cpu;  // sizes across the kernel's chunk boundaries, one non-contiguous
      for (std::int64_t n : {1, 1000, 65536, 65537, 200003}) cpu.push_back(torch::randn({n}) * 300);
      cpu.push_back(torch::randn({64, 48}).t());
      std::vector<Tensor> expected, grads;
      for (Tensor& t : cpu) {
        t = t.to(dtype);
        expected.push_back((t.to(torch::kFloat) * static_cast<float>(inv)).to(dtype));
        grads.push_back(t.to(kCuda));
      }
      grads.back() = cpu.back().to(kCuda).t().contiguous().t();  // keep it non-contiguous
      Tensor found_inf = torch::zeros({1}, torch::dtype(torch::kFloat).device(kCuda));
      const Tensor inv_scale = torch::full({1}, inv, torch::dtype(torch::kFloat).device(kCuda));
      mixprec::non_finite_check_and_unscale_(grads, found_inf, inv_scale);
      EXPECT_EQ(found_inf.item<float>(), 0.0f) << dtype;
      for (std::size_t i = 0; i < grads.size(); ++i) {
        EXPECT_TRUE(torch::equal(grads[i].cpu(), expected[i]))
            << dtype << " inv=" << inv << " tensor " << i;
      }
      // One NaN in the last element of one tensor sets found_inf.
      grads[2].index_put_({65535}, std::numeric_limits<float>::quiet_NaN());
      mixprec::non_finite_check_and_unscale_(grads, found_inf, inv_scale);
      EXPECT_EQ(found_inf.item<float>(), 1.0f) << dtype;
    }
  }
}

// PyTorch refuses fp16 gradients in unscale_ ("Attempting to unscale FP16 gradients.").
TEST(GpuGradScaler, Fp16GradsAreRefusedByUnscaleOnCuda) {
  SKIP_WITHOUT_CUDA();
  torch::nn::Sequential net = make_mlp(kCuda, torch::kHalf);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
  mixprec::GradScaler scaler;
  const Batches b = make_batches(1, {}).to(kCuda);
  scaler.scale(torch::mse_loss(net->forward(b.x[0].to(torch::kHalf)), b.y[0].to(torch::kHalf)))
      .backward();
  ASSERT_EQ(net->parameters()[0].grad().scalar_type(), torch::kHalf);
  try {
    scaler.unscale_(opt);
    ADD_FAILURE() << "unscale_ accepted fp16 gradients";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Attempting to unscale FP16 gradients."),
              std::string::npos)
        << e.what();
  }
}

struct RunResult {
  std::vector<double> scales;   // get_scale() after every update()
  std::vector<Tensor> params;   // final parameters
};

RunResult train(OptKind kind, torch::Device device, const Batches& cpu_batches, bool autocast) {
  torch::nn::Sequential net = make_mlp(device);
  auto opt = make_optimizer(kind, net->parameters());
  mixprec::GradScaler scaler(small_scaler_options());
  const Batches b = cpu_batches.to(device);
  RunResult r;
  for (std::size_t s = 0; s < b.x.size(); ++s) {
    iteration(net, *opt, scaler, b.x[s], b.y[s], autocast);
    r.scales.push_back(scaler.get_scale());
  }
  r.params = clones(net->parameters());
  return r;
}

// The same float32 training (no autocast: the CPU has no fp16 matmul in LibTorch 1.13) on CUDA
// and on the CPU: the same scale sequence (growth and backoff at the same steps), parameters equal
// up to float32 summation order.
TEST(GpuGradScaler, Float32TrainingOnCudaMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  const Batches batches = make_batches(14, {4, 9, 10});
  for (OptKind kind : kAllOptimizers) {
    SCOPED_TRACE(name_of(kind));
    const RunResult cpu = train(kind, torch::kCPU, batches, false);
    const RunResult gpu = train(kind, kCuda, batches, false);
    EXPECT_EQ(gpu.scales, cpu.scales);
    // The run must exercise both directions, or it would prove little.
    EXPECT_LT(cpu.scales[4], cpu.scales[3]) << "the inf at step 4 did not back off";
    EXPECT_GT(cpu.scales[2], 1024.0) << "no growth after three clean steps";
    EXPECT_TRUE(all_close(gpu.params, cpu.params, 1e-4, 1e-5))
        << "max |cuda - cpu| = " << max_abs_diff(gpu.params, cpu.params);
  }
}

// ---------------------------------------------------------------------------------------------
// (b) no host synchronisation; a skipped step leaves everything untouched

TEST(GpuGradScaler, SyncDebugModeErrorCatchesASync) {
  // Positive control for the next test: under L_ERROR a blocking read must throw here, or a
  // "no sync" result would prove nothing (e.g. a second copy of c10's warning state).
  SKIP_WITHOUT_CUDA();
  const Tensor t = torch::ones({}, torch::device(kCuda));
  SyncDebugModeGuard guard(c10::cuda::SyncDebugMode::L_ERROR);
  EXPECT_THROW(t.item<float>(), c10::Error);
}

TEST(GpuGradScaler, FusedIterationMakesNoHostSyncAndSkipsOnInf) {
  SKIP_WITHOUT_CUDA();
  constexpr int kSteps = 7, kInfStep = 4;
  for (OptKind kind : kFusedOptimizers) {
    SCOPED_TRACE(name_of(kind));
    torch::nn::Sequential net = make_mlp(kCuda);
    auto opt = make_optimizer(kind, net->parameters());
    mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(1024.0).growth_interval(100));
    const Batches b = make_batches(kSteps, {kInfStep}).to(kCuda);  // prepared before the guard
    torch::cuda::synchronize();
    std::vector<Tensor> params_before, params_after, moments_before, moments_after;
    Tensor scale_before, scale_after;
    std::string sync_error;
    int s = 0;  // the iteration that raised, if any
    {
      SyncDebugModeGuard guard(c10::cuda::SyncDebugMode::L_ERROR);
      try {
        for (; s < kSteps; ++s) {
          if (s == kInfStep) {  // device-side clones only: reading them would sync
            params_before = clones(net->parameters());
            moments_before = moments(*opt, net->parameters());
            scale_before = scaler.get_scale_async().clone();
          }
          iteration(net, *opt, scaler, b.x[s], b.y[s], /*autocast=*/true);
          if (s == kInfStep) {
            params_after = clones(net->parameters());
            moments_after = moments(*opt, net->parameters());
            scale_after = scaler.get_scale_async().clone();
          }
        }
      } catch (const c10::Error& e) {
        sync_error = e.what();
      }
    }  // sync mode restored: reading values is allowed from here on
    ASSERT_TRUE(sync_error.empty()) << "a host sync (or error) in iteration " << s
                                    << " (0 creates the scale and the optimizer state): "
                                    << sync_error;
    EXPECT_EQ(max_abs_diff(params_after, params_before), 0.0) << "parameters changed on inf";
    ASSERT_FALSE(moments_before.empty());
    for (const Tensor& m : moments_before) EXPECT_TRUE(m.defined()) << "no optimizer state";
    EXPECT_EQ(max_abs_diff(moments_after, moments_before), 0.0) << "moments changed on inf";
    EXPECT_EQ(scale_after.item<double>(), 0.5 * scale_before.item<double>());
    EXPECT_GT(max_abs_diff(clones(net->parameters()), params_after), 0.0)
        << "the clean steps after the inf did not update the parameters";
  }
}

// A skipped step must be as if it never happened (step counts included: AdamW's bias correction
// would differ otherwise). In float32 a power-of-two scale cancels exactly, so the run with an
// inf at step 3 must end where the run without that batch ends.
TEST(GpuGradScaler, SkippedFusedStepEqualsOmittedStep) {
  SKIP_WITHOUT_CUDA();
  const Batches with_inf = make_batches(8, {3});
  Batches without = with_inf;
  without.x.erase(without.x.begin() + 3);
  without.y.erase(without.y.begin() + 3);
  for (OptKind kind : kFusedOptimizers) {
    SCOPED_TRACE(name_of(kind));
    const RunResult a = train(kind, kCuda, with_inf, false);
    const RunResult b = train(kind, kCuda, without, false);
    EXPECT_TRUE(all_close(a.params, b.params, 1e-6, 1e-7))
        << "max |skipped - omitted| = " << max_abs_diff(a.params, b.params);
  }
}

// ---------------------------------------------------------------------------------------------
// (c) CUDA graph capture of the whole iteration

// Warm-up iterations on a side stream (as PyTorch's test_graph_grad_scaling and its
// whole-network capture recipe), so that lazily created state (scale, optimizer moments, cuBLAS
// handles) exists before capture.
void warm_up(torch::nn::Sequential& net, torch::optim::Optimizer& opt, mixprec::GradScaler& scaler,
             const Batches& b) {
  at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
  at::cuda::CUDAEvent ready;
  ready.record(at::cuda::getCurrentCUDAStream());
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    for (std::size_t s = 0; s < b.x.size(); ++s) iteration(net, opt, scaler, b.x[s], b.y[s], true);
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(at::cuda::getCurrentCUDAStream());
}

// The first scale() creates the scaler's state on the device with fills, no copy from host
// memory, so it can run inside capture (as PyTorch's device-side fills); hysteresis 2 makes a
// counter non-zero from the start.
TEST(GpuGradScaler, AFirstScaleCanBeCapturedInACudaGraph) {
  SKIP_WITHOUT_CUDA();
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().hysteresis(2).history_size(4));
  const Tensor loss = torch::full({}, 3.0f, torch::TensorOptions().device(kCuda));
  at::cuda::CUDAGraph graph;
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  Tensor scaled;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    graph.capture_begin();
    scaled = scaler.scale(loss);
    graph.capture_end();
  }
  graph.replay();
  torch::cuda::synchronize();
  EXPECT_EQ(scaled.item<float>(), 3.0f * 65536.0f);
  EXPECT_EQ(scaler.telemetry().hysteresis_tracker, 2);
  EXPECT_EQ(scaler.telemetry().last_overflow_iteration, -1);
}

TEST(GpuGradScaler, CapturedIterationReplaysLikeEagerIterations) {
  SKIP_WITHOUT_CUDA();
  const Batches warm = make_batches(3, {}, 21).to(kCuda);
  const Batches fresh = make_batches(8, {2, 5}, 22).to(kCuda);  // two of them make an inf
  for (OptKind kind : kFusedOptimizers) {
    SCOPED_TRACE(name_of(kind));
    // Eager reference.
    torch::nn::Sequential eager_net = make_mlp(kCuda);
    auto eager_opt = make_optimizer(kind, eager_net->parameters());
    mixprec::GradScaler eager_scaler(small_scaler_options());
    warm_up(eager_net, *eager_opt, eager_scaler, warm);
    std::vector<Tensor> eager_scales;
    for (std::size_t s = 0; s < fresh.x.size(); ++s) {
      iteration(eager_net, *eager_opt, eager_scaler, fresh.x[s], fresh.y[s], true);
      eager_scales.push_back(eager_scaler.get_scale_async().clone());
    }

    // Graphed: the same warm-up, one capture, one replay per fresh input.
    torch::nn::Sequential net = make_mlp(kCuda);
    auto opt = make_optimizer(kind, net->parameters());
    mixprec::GradScaler scaler(small_scaler_options());
    warm_up(net, *opt, scaler, warm);
    Tensor static_x = torch::zeros_like(fresh.x[0]), static_y = torch::zeros_like(fresh.y[0]);
    for (Tensor& p : net->parameters()) p.mutable_grad() = Tensor();  // zero_grad(set_to_none)
    torch::cuda::synchronize();
    at::cuda::CUDAGraph graph;
    {
      c10::cuda::CUDAStreamGuard on_side(at::cuda::getStreamFromPool());
      graph.capture_begin();
      try {
        iteration(net, *opt, scaler, static_x, static_y, true);
      } catch (...) {
        try { graph.capture_end(); } catch (...) {}  // leave no dangling capture behind
        throw;
      }
      graph.capture_end();
    }
    std::vector<Tensor> scales;
    for (std::size_t s = 0; s < fresh.x.size(); ++s) {
      static_x.copy_(fresh.x[s]);
      static_y.copy_(fresh.y[s]);
      graph.replay();
      scales.push_back(scaler.get_scale_async().clone());
    }
    torch::cuda::synchronize();
    ASSERT_EQ(scales.size(), eager_scales.size());
    for (std::size_t s = 0; s < scales.size(); ++s) {
      EXPECT_EQ(scales[s].item<double>(), eager_scales[s].item<double>()) << "step " << s;
    }
    EXPECT_LT(eager_scales[2].item<double>(), eager_scales[1].item<double>())
        << "the inf input did not back the scale off";
    EXPECT_TRUE(all_close(clones(net->parameters()), clones(eager_net->parameters()), 1e-5, 1e-6))
        << "max |graph - eager| = "
        << max_abs_diff(clones(net->parameters()), clones(eager_net->parameters()));
    const auto m = moments(*opt, net->parameters()), em = moments(*eager_opt, eager_net->parameters());
    EXPECT_TRUE(all_close(m, em, 1e-5, 1e-7)) << "max |moments| diff = " << max_abs_diff(m, em);
  }
}

// ---------------------------------------------------------------------------------------------
// (e) grads on two kinds of device (an embedding kept on the CPU): the copies of found_inf and
// inv_scale that land on the CPU must wait (Note [Copies between devices wait when they land on
// the CPU] in src/torch/ops/functional.cpp); with non-blocking ones the CPU kernel could read a stale
// inv_scale and its found_inf = 1 be overwritten by the late copy of 0, and the step apply inf.

TEST(GpuGradScaler, GradsOnTheCpuAndOnCudaAgreeOnEveryOverflow) {
  SKIP_WITHOUT_CUDA();
  const torch::Device cpu(torch::kCPU);
  constexpr std::int64_t kN = std::int64_t{1} << 22;  // large: the CPU kernel takes a while
  for (const torch::Device scale_device : {kCuda, cpu}) {
    for (const torch::Device inf_device : {kCuda, cpu}) {
      const std::string where = std::string("scale on ") + scale_device.str() + ", inf on " +
                                inf_device.str();
      Tensor on_cpu = torch::zeros({kN}, torch::requires_grad());
      Tensor on_cuda = torch::zeros({kN}, torch::TensorOptions().device(kCuda).requires_grad(true));
      torch::optim::SGD opt({on_cpu, on_cuda}, torch::optim::SGDOptions(1.0));
      mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(4.0));
      scaler.scale(torch::ones({}, torch::TensorOptions().device(scale_device)));
      // A clean step: grads 4 / scale 4 = 1, so both parameters become -1.
      on_cpu.mutable_grad() = torch::full_like(on_cpu, 4.0);
      on_cuda.mutable_grad() = torch::full_like(on_cuda, 4.0);
      scaler.step(opt);
      scaler.update();
      EXPECT_TRUE(torch::equal(on_cpu.detach(), torch::full({kN}, -1.0))) << where;
      EXPECT_TRUE(torch::equal(on_cuda.detach().cpu(), torch::full({kN}, -1.0))) << where;
      // An overflow in the last element on one side: nothing moves, the scale halves.
      on_cpu.mutable_grad() = torch::full_like(on_cpu, 4.0);
      on_cuda.mutable_grad() = torch::full_like(on_cuda, 4.0);
      Tensor& bad = inf_device.is_cuda() ? on_cuda : on_cpu;
      bad.mutable_grad()[kN - 1] = std::numeric_limits<float>::infinity();
      scaler.step(opt);
      scaler.update();
      EXPECT_TRUE(torch::equal(on_cpu.detach(), torch::full({kN}, -1.0))) << where;
      EXPECT_TRUE(torch::equal(on_cuda.detach().cpu(), torch::full({kN}, -1.0))) << where;
      EXPECT_EQ(scaler.get_scale(), 2.0) << where;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// (d) two GPUs in one process

TEST(GpuGradScaler, TwoGpusInfOnSecondDeviceSkipsTheStep) {
  SKIP_WITHOUT_CUDA();
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const torch::Device d0(torch::kCUDA, 0), d1(torch::kCUDA, 1);
  for (OptKind kind : kAllOptimizers) {
    SCOPED_TRACE(name_of(kind));
    torch::manual_seed(5);
    Tensor w0 = torch::randn({1000}).to(d0).requires_grad_();
    Tensor w1 = torch::randn({1000}).to(d1).requires_grad_();
    auto opt = make_optimizer(kind, {w0, w1});
    mixprec::GradScaler scaler(small_scaler_options());
    const Tensor x0 = torch::rand({1000}).to(d0);
    const Tensor x1_clean = torch::rand({1000}).to(d1);
    Tensor x1_inf = x1_clean.clone();
    x1_inf.index_put_({17}, std::numeric_limits<float>::infinity());
    const auto step = [&](const Tensor& x1, bool inspect) {
      w0.mutable_grad() = Tensor();
      w1.mutable_grad() = Tensor();
      const Tensor loss = (w0 * x0).square().sum() + (w1 * x1).square().sum().to(d0);
      scaler.scale(loss).backward();
      if (inspect) {
        scaler.unscale_(*opt);
        const mixprec::FoundInfPerDevice found = scaler.found_inf_per_device(*opt);
        ASSERT_EQ(found.size(), 2u);
        EXPECT_EQ(found[0].first, d0);
        EXPECT_EQ(found[1].first, d1);
        EXPECT_EQ(found[0].second.device(), d0);
        EXPECT_EQ(found[1].second.device(), d1);
        EXPECT_EQ(found[0].second.item<float>(), 0.0f) << "cuda:0 had no inf";
        EXPECT_EQ(found[1].second.item<float>(), 1.0f) << "cuda:1 had the inf";
      }
      scaler.step(*opt);
      scaler.update();
    };
    step(x1_clean, false);  // a clean step creates the state and moves both parameters
    EXPECT_EQ(scaler.get_scale_async().device(), d0) << "the scale lives on the loss' device";
    const std::vector<Tensor> before = clones({w0, w1});
    const std::vector<Tensor> state_before = moments(*opt, {w0, w1});
    const double scale_before = scaler.get_scale();
    step(x1_inf, kind == OptKind::kTorchSgd);  // PyTorch's unscale_ path: inspect per device
    EXPECT_EQ(max_abs_diff(clones({w0, w1}), before), 0.0) << "a parameter moved on inf";
    EXPECT_EQ(max_abs_diff(moments(*opt, {w0, w1}), state_before), 0.0) << "state moved on inf";
    EXPECT_EQ(scaler.get_scale(), 0.5 * scale_before);
    step(x1_clean, false);
    EXPECT_GT(max_abs_diff(clones({w1}), {before[1]}), 0.0) << "cuda:1 not updated when clean";
  }
}

}  // namespace
}  // namespace mixprec_gpu_test
