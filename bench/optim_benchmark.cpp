// Benchmarks of a whole GradScaler + optimizer step on the parameter list of a GPT-2-small-like
// model (~124M fp32 parameters): mixprec's fused SGD (momentum), Adam and AdamW with its
// GradScaler; on LibTorch >= 2.4, PyTorch's GradScaler path on the same shapes (the inf check with
// inv_scale 1, then at::_fused_sgd_ / _fused_adam_ / _fused_adamw_ with grad_scale and found_inf,
// then at::_amp_update_scale_, as torch.amp.GradScaler("cpu") drives a fused optimizer); and what
// a LibTorch user writes today (torch::optim::AdamW + scaler.unscale_()). The bandwidth ceiling is
// unscale_benchmark's in-place scale loop (bench/ratios.py puts the two together).
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <mixprec/grad_scaler.h>
#include <mixprec/optim.h>
#include <mixprec/torch_version.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gpt2_shapes.h"
#include "mixprec/core/kernels.h"

#if MIXPREC_TORCH_CPU_AMP_KERNELS
#define MIXPREC_BENCH_PYTORCH_KERNELS  // PyTorch's CPU AMP and fused optimizer kernels
#endif

namespace {

using mixprec_bench::gpt2_small_shapes;

enum class Kind { kSgd, kAdam, kAdamW };

// Parameters with gradients holding small random values.
std::vector<torch::Tensor> make_model(std::int64_t* numel, torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params;
  *numel = 0;
  for (const auto& shape : gpt2_small_shapes()) {
    params.push_back((torch::randn(shape) * 0.02).to(dtype));
    params.back().mutable_grad() = (torch::randn(shape) * 1e-3).to(dtype);
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

// Bytes one step moves at the least: a read-only inf check of the grads, then one pass that reads
// grad and param (and the moments or momentum buffer) and writes them back (the grad included:
// the step stores the unscaled grad, as PyTorch's kernels do). Every variant is credited the same
// bytes for its element size, so the rates compare with each other and with the scale loop's.
std::int64_t step_bytes(Kind kind, std::int64_t numel, std::int64_t element_size) {
  const std::int64_t arrays = kind == Kind::kSgd ? 3 : 4;
  return numel * element_size * (1 + 2 * arrays);
}

void set_counters(benchmark::State& state, Kind kind, std::int64_t numel,
                  std::int64_t element_size = 4) {
  state.SetBytesProcessed(state.iterations() * step_bytes(kind, numel, element_size));
  state.counters["params_M"] = static_cast<double>(numel) / 1e6;
  state.counters["mixprec_threads"] = mixprec::core::get_num_threads();
  state.counters["torch_threads"] = at::get_num_threads();
}

constexpr double kLr = 1e-3, kWeightDecay = 0.01, kMomentum = 0.9;

// Runs `one_step` (a whole scaler step and update) timed, with the grads scaled again untimed.
template <typename Step>
void time_steps(benchmark::State& state, std::vector<torch::Tensor>& params,
                const std::function<double()>& scale, Kind kind, std::int64_t numel,
                const Step& one_step, std::int64_t element_size = 4) {
  scale_grads(params, scale());
  one_step();  // creates the state outside the timing
  for (auto _ : state) {
    state.PauseTiming();
    scale_grads(params, scale());
    state.ResumeTiming();
    one_step();
  }
  set_counters(state, kind, numel, element_size);
}

template <typename Optimizer, typename Options>
void run_mixprec(benchmark::State& state, Kind kind, const Options& options,
                 torch::Dtype dtype = torch::kFloat) {
  std::int64_t numel = 0;
  std::vector<torch::Tensor> params = make_model(&numel, dtype);
  Optimizer optimizer(params, options);
  mixprec::GradScaler scaler;
  scaler.scale(torch::ones({}));
  time_steps(
      state, params, [&] { return scaler.get_scale(); }, kind, numel,
      [&] {
        scaler.step(optimizer);  // inf check of the scaled grads, then one fused pass
        scaler.update();
      },
      torch::elementSize(dtype));
}

void BM_mixprec_SgdWithScaler(benchmark::State& state) {
  run_mixprec<mixprec::optim::SGD>(state, Kind::kSgd,
                                   torch::optim::SGDOptions(kLr).momentum(kMomentum));
}
void BM_mixprec_AdamWithScaler(benchmark::State& state) {
  run_mixprec<mixprec::optim::Adam>(state, Kind::kAdam, torch::optim::AdamOptions(kLr));
}
void BM_mixprec_AdamWWithScaler(benchmark::State& state) {
  run_mixprec<mixprec::optim::AdamW>(state, Kind::kAdamW,
                                     torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));
}
// bf16 parameters and state (math in float): the same per-byte speed is the aim.
void BM_mixprec_AdamWWithScaler_bf16(benchmark::State& state) {
  run_mixprec<mixprec::optim::AdamW>(state, Kind::kAdamW,
                                     torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay),
                                     torch::kBFloat16);
}

#ifdef MIXPREC_BENCH_PYTORCH_KERNELS
// torch.amp.GradScaler("cpu").step(opt) + update() with opt = SGD/Adam/AdamW(fused=True), in the
// calls Python makes: found_inf from the inf check with inv_scale 1 (_check_inf_per_device), the
// state steps advanced and taken back on overflow (_fused_adam), the fused kernel with the scale
// and found_inf, then _amp_update_scale_.
void run_pytorch(benchmark::State& state, Kind kind) {
  std::int64_t numel = 0;
  std::vector<torch::Tensor> params = make_model(&numel);
  std::vector<torch::Tensor> grads, exp_avgs, exp_avg_sqs, steps, buffers;
  for (const torch::Tensor& p : params) {
    grads.push_back(p.grad());
    if (kind == Kind::kSgd) {
      buffers.push_back(torch::empty_like(p));
    } else {
      exp_avgs.push_back(torch::zeros_like(p));
      exp_avg_sqs.push_back(torch::zeros_like(p));
      steps.push_back(torch::zeros({}, torch::kFloat));
    }
  }
  torch::Tensor scale = torch::full({}, 65536.0f), tracker = torch::zeros({}, torch::kInt);
  torch::Tensor one = torch::ones({}), found_inf = torch::zeros({});
  bool first_step = true;
  time_steps(state, params, [&] { return scale.item<double>(); }, kind, numel, [&] {
    found_inf.zero_();
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, one);
    if (kind == Kind::kSgd) {
      at::_fused_sgd_(params, grads, buffers, 0.0, kMomentum, kLr, 0.0, /*nesterov=*/false,
                      /*maximize=*/false, first_step, scale, found_inf);
      first_step = false;
    } else {
      at::_foreach_add_(steps, 1);
      if (kind == Kind::kAdamW) {
        at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, kLr, 0.9, 0.999,
                          kWeightDecay, 1e-8, /*amsgrad=*/false, /*maximize=*/false, scale,
                          found_inf);
      } else {
        at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, kLr, 0.9, 0.999, 0.0,
                         1e-8, /*amsgrad=*/false, /*maximize=*/false, scale, found_inf);
      }
      at::_foreach_sub_(steps, std::vector<torch::Tensor>(steps.size(), found_inf));
    }
    at::_amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2000);
  });
}

void BM_pytorch_SgdWithScaler(benchmark::State& state) { run_pytorch(state, Kind::kSgd); }
void BM_pytorch_AdamWithScaler(benchmark::State& state) { run_pytorch(state, Kind::kAdam); }
void BM_pytorch_AdamWWithScaler(benchmark::State& state) { run_pytorch(state, Kind::kAdamW); }
#endif

// What a LibTorch user writes without mixprec's optimizers: torch::optim::AdamW + unscale_().
void BM_TorchAdamWWithUnscale(benchmark::State& state) {
  std::int64_t numel = 0;
  std::vector<torch::Tensor> params = make_model(&numel);
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));
  mixprec::GradScaler scaler;
  scaler.scale(torch::ones({}));
  time_steps(state, params, [&] { return scaler.get_scale(); }, Kind::kAdamW, numel, [&] {
    scaler.unscale_(optimizer);
    scaler.step(optimizer);
    scaler.update();
  });
}

// ---- per-iteration overhead on a tiny model (seed example 3: Linear(10, 1) + SGD) --------------
// GradScaler's own cost per iteration: scale + step + update, minus the optimizer's step alone.
// bench/python_overhead.py times the same with torch.amp.GradScaler("cpu") in Python.
struct Tiny {
  torch::nn::Linear model{10, 1};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.01)};
  torch::Tensor loss = torch::ones({});
  Tiny() {
    for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  }
};

void BM_tiny_optimizer_step(benchmark::State& state) {
  Tiny tiny;
  for (auto _ : state) tiny.optimizer.step();
}

void BM_tiny_scaler_iteration(benchmark::State& state) {
  Tiny tiny;
  mixprec::GradScaler scaler;
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.scale(tiny.loss));
    scaler.step(tiny.optimizer);
    scaler.update();
  }
}

}  // namespace

#define MIXPREC_BENCH(fn) \
  BENCHMARK(fn)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(10)->Repetitions(3)

MIXPREC_BENCH(BM_mixprec_SgdWithScaler);
MIXPREC_BENCH(BM_mixprec_AdamWithScaler);
MIXPREC_BENCH(BM_mixprec_AdamWWithScaler);
MIXPREC_BENCH(BM_mixprec_AdamWWithScaler_bf16);
#ifdef MIXPREC_BENCH_PYTORCH_KERNELS
MIXPREC_BENCH(BM_pytorch_SgdWithScaler);
MIXPREC_BENCH(BM_pytorch_AdamWithScaler);
MIXPREC_BENCH(BM_pytorch_AdamWWithScaler);
#endif
BENCHMARK(BM_tiny_optimizer_step)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_tiny_scaler_iteration)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TorchAdamWWithUnscale)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(3);

int main(int argc, char** argv) {
  // Both libraries on every hardware thread: LibTorch's own default can be lower (Debian 12's
  // LibTorch 1.13 picks 1 on this 2-vCPU machine), and mixprec follows the OpenMP setting it left.
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  mixprec::core::set_num_threads(threads);
  benchmark::AddCustomContext("mixprec_threads", std::to_string(threads));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
