// Benchmarks of a full AdamW step with GradScaler on the parameter list of a GPT-2-small-like
// model (~124M parameters): mixprec::optim::AdamW (fused) against torch::optim::AdamW +
// scaler.unscale_(), with the machine's copy bandwidth over the same parameters as the ceiling.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <mixprec/grad_scaler.h>
#include <mixprec/optim.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "gpt2_shapes.h"
#include "mixprec/core/kernels.h"

namespace {

using mixprec_bench::gpt2_small_shapes;

// Parameters with gradients holding small random values.
std::vector<torch::Tensor> make_model(std::int64_t* numel) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params;
  *numel = 0;
  for (const auto& shape : gpt2_small_shapes()) {
    params.push_back(torch::randn(shape) * 0.02);
    params.back().mutable_grad() = torch::randn(shape) * 1e-3;
    *numel += params.back().numel();
  }
  return params;
}

// Multiplies every gradient by the scaler's scale, as backward() of a scaled loss would: the
// unscale in the step divides it back exactly (a power of two), so the values never drift.
void scale_grads(std::vector<torch::Tensor>& params, double scale) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : params) p.mutable_grad().mul_(scale);
}

void set_counters(benchmark::State& state, std::int64_t numel) {
  // The traffic of one unscale + AdamW step done once: param, grad, exp_avg, exp_avg_sq read
  // and written (fp32). Both variants are credited the same bytes, so the rates compare.
  state.SetBytesProcessed(state.iterations() * numel * 8 * 4);
  state.counters["params_M"] = static_cast<double>(numel) / 1e6;
  state.counters["mixprec_threads"] = mixprec::core::get_num_threads();
  state.counters["torch_threads"] = at::get_num_threads();
}

const auto kAdamW = torch::optim::AdamWOptions(1e-3).weight_decay(0.01);

void BM_FusedAdamWWithScaler(benchmark::State& state) {
  std::int64_t numel = 0;
  std::vector<torch::Tensor> params = make_model(&numel);
  mixprec::optim::AdamW optimizer(params, kAdamW);
  mixprec::GradScaler scaler;
  const torch::Tensor loss = torch::ones({});
  const auto one_step = [&] {
    scaler.step(optimizer);  // inf check of the scaled grads, then one fused pass
    scaler.update();
  };
  scaler.scale(loss);
  scale_grads(params, scaler.get_scale());
  one_step();  // creates the state outside the timing
  for (auto _ : state) {
    state.PauseTiming();
    scale_grads(params, scaler.get_scale());
    state.ResumeTiming();
    one_step();
  }
  set_counters(state, numel);
}

void BM_TorchAdamWWithUnscale(benchmark::State& state) {
  std::int64_t numel = 0;
  std::vector<torch::Tensor> params = make_model(&numel);
  torch::optim::AdamW optimizer(params, kAdamW);
  mixprec::GradScaler scaler;
  const torch::Tensor loss = torch::ones({});
  const auto one_step = [&] {
    scaler.unscale_(optimizer);  // what a LibTorch user writes today
    scaler.step(optimizer);
    scaler.update();
  };
  scaler.scale(loss);
  scale_grads(params, scaler.get_scale());
  one_step();
  for (auto _ : state) {
    state.PauseTiming();
    scale_grads(params, scaler.get_scale());
    state.ResumeTiming();
    one_step();
  }
  set_counters(state, numel);
}

// The ceiling: copying as many bytes as the step moves (ATen's parallel copy).
void BM_CopyCeiling(benchmark::State& state) {
  std::int64_t numel = 0;
  for (const auto& shape : gpt2_small_shapes()) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    numel += n;
  }
  // 4 arrays of numel floats copied = 8 x 4 bytes per parameter, as credited above.
  torch::Tensor src = torch::rand({4 * numel}), dst = torch::empty({4 * numel});
  for (auto _ : state) {
    dst.copy_(src);
    benchmark::DoNotOptimize(dst.data_ptr());
  }
  set_counters(state, numel);
}

}  // namespace

BENCHMARK(BM_CopyCeiling)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_FusedAdamWWithScaler)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_TorchAdamWWithUnscale)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(10);

BENCHMARK_MAIN();
