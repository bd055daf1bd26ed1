// fp8::Linear on the CPU beside the layer it replaces, in one run: a bf16 torch::nn::Linear, and
// fp8::Linear under a current-scaling recipe on the same bf16 input (its GEMMs are at::_scaled_mm
// from LibTorch 2.14, an emulation before: docs/fp8.md, "What runs where"). Forward alone, and
// forward + backward, on a GPT-2-small MLP shape (768 -> 3072) with 512 and 2048 tokens.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <mixprec/fp8.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "mixprec/core/kernels.h"

namespace {

constexpr std::int64_t kIn = 768, kOut = 3072;

template <typename Module>
void run(benchmark::State& state, Module& lin, mixprec::fp8::Recipe* recipe, bool backward) {
  const std::int64_t tokens = state.range(0);
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({tokens, kIn}).to(torch::kBFloat16).requires_grad_(backward);
  for (auto _ : state) {
    torch::Tensor y;
    if (recipe != nullptr) {
      mixprec::fp8::Autocast fp8(*recipe);
      y = lin->forward(x);
    } else {
      y = lin->forward(x);
    }
    if (backward) y.sum().backward();
    benchmark::DoNotOptimize(y.data_ptr());
  }
  const double flops = 2.0 * static_cast<double>(tokens * kIn * kOut) * (backward ? 3 : 1);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_torch_linear_bf16(benchmark::State& state, bool backward) {
  torch::nn::Linear lin(kIn, kOut);
  lin->to(torch::kBFloat16);
  run(state, lin, nullptr, backward);
}

void BM_fp8_linear_current(benchmark::State& state, bool backward) {
  mixprec::fp8::Linear lin(kIn, kOut);
  lin->to(torch::kBFloat16);
  mixprec::fp8::Recipe recipe(
      mixprec::fp8::RecipeOptions().scaling(mixprec::fp8::Scaling::kCurrent));
  run(state, lin, &recipe, backward);
}

#define MIXPREC_LINEAR_BENCH(fn, name, backward) \
  BENCHMARK_CAPTURE(fn, name, backward)          \
      ->UseRealTime()                            \
      ->Unit(benchmark::kMillisecond)            \
      ->Arg(512)                                 \
      ->Arg(2048)

MIXPREC_LINEAR_BENCH(BM_torch_linear_bf16, forward, false);
MIXPREC_LINEAR_BENCH(BM_fp8_linear_current, forward, false);
MIXPREC_LINEAR_BENCH(BM_torch_linear_bf16, forward_backward, true);
MIXPREC_LINEAR_BENCH(BM_fp8_linear_current, forward_backward, true);

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  mixprec::core::set_num_threads(threads);
  benchmark::AddCustomContext("threads", std::to_string(threads));
  benchmark::AddCustomContext(
      "libtorch", std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
