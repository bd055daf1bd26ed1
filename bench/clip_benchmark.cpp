// Gradient clipping inside the AMP step on a GPT-2-small-like parameter list (~124M fp32): mixprec's
// GradScaler::clip_grad_norm_ + fused AdamW (or SGD with momentum) against PyTorch's own recipe on
// the same tensors, from the same LibTorch, in the calls Python makes (LibTorch >= 2.4):
//   scaler.unscale_(opt)    -> _amp_foreach_non_finite_check_and_unscale_ (reads, writes the grads)
//   clip_grad_norm_(foreach) -> _foreach_norm, linalg_vector_norm of the stack (reads them), the
//                               coefficient, _foreach_mul_ (reads, writes them)
//   scaler.step(opt)         -> _fused_adamw_ / _fused_sgd_ with found_inf, then the step counts
//   scaler.update()          -> _amp_update_scale_
// and mixprec's fused step without clipping. Every benchmark restores the scaled grads untimed
// before each step (clipping shrinks them), and they are run interleaved, repetition by repetition
// (--benchmark_enable_random_interleaving), so the medians compare under the same machine state.
// bytes_per_second counts the traffic of the fused floor (36 B per fp32 AdamW parameter, 28 for
// SGD) for every variant, so the rates are comparable; docs/performance.md has the figures.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <mixprec/clip.h>
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

namespace {

constexpr double kLr = 1e-3, kWeightDecay = 0.01, kMomentum = 0.9, kMaxNorm = 1.0;
constexpr double kScale = 65536.0;

enum class Kind { kSgd, kAdamW };

// Parameters with scaled gradients (norm about 3 unscaled: every step clips), and a pristine copy
// of the scaled gradients to restore before each step.
struct Model {
  std::vector<torch::Tensor> params, grads, pristine;
  std::int64_t numel = 0;
  Model() {
    torch::manual_seed(0);
    for (const auto& shape : mixprec_bench::gpt2_small_shapes()) {
      params.push_back(torch::randn(shape) * 0.02);
      params.back().mutable_grad() = torch::randn(shape) * (3e-4 * kScale);
      grads.push_back(params.back().grad());
      pristine.push_back(grads.back().clone());
      numel += params.back().numel();
    }
  }
  void restore() {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i].copy_(pristine[i]);
  }
};

// The fused floor: 36 B per AdamW parameter (read the grad once for the check and the norm; the
// step reads param, grad and two moments and writes them back), 28 B for SGD with momentum.
void set_counters(benchmark::State& state, Kind kind, std::int64_t numel) {
  const std::int64_t bytes = kind == Kind::kAdamW ? 36 : 28;
  state.SetBytesProcessed(state.iterations() * numel * bytes);
  state.counters["params_M"] = static_cast<double>(numel) / 1e6;
  state.counters["threads"] = mixprec::core::get_num_threads();
}

template <typename Step>
void time_steps(benchmark::State& state, Model& model, Kind kind, const Step& one_step) {
  model.restore();
  one_step();  // creates the optimizer state outside the timing
  for (auto _ : state) {
    state.PauseTiming();
    model.restore();
    state.ResumeTiming();
    one_step();
  }
  set_counters(state, kind, model.numel);
}

std::unique_ptr<torch::optim::Optimizer> make_fused(Kind kind, Model& model) {
  if (kind == Kind::kAdamW) {
    return std::make_unique<mixprec::optim::AdamW>(
        model.params, torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));
  }
  return std::make_unique<mixprec::optim::SGD>(model.params,
                                               torch::optim::SGDOptions(kLr).momentum(kMomentum));
}

void run_mixprec(benchmark::State& state, Kind kind, bool clip) {
  Model model;
  auto optimizer = make_fused(kind, model);
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(kScale));
  scaler.scale(torch::ones({}));
  time_steps(state, model, kind, [&] {
    if (clip) scaler.clip_grad_norm_(*optimizer, kMaxNorm);  // one read: check and norm
    scaler.step(*optimizer);  // one pass: unscale, clip, update
    scaler.update();
  });
}

void BM_clip_mixprec_AdamW(benchmark::State& state) { run_mixprec(state, Kind::kAdamW, true); }
void BM_noclip_mixprec_AdamW(benchmark::State& state) { run_mixprec(state, Kind::kAdamW, false); }
void BM_clip_mixprec_Sgd(benchmark::State& state) { run_mixprec(state, Kind::kSgd, true); }
void BM_noclip_mixprec_Sgd(benchmark::State& state) { run_mixprec(state, Kind::kSgd, false); }

#if MIXPREC_TORCH_CPU_AMP_KERNELS
// PyTorch's recipe in the calls Python 2.15 makes (torch/amp/grad_scaler.py,
// torch/nn/utils/clip_grad.py with foreach, torch/optim/adamw.py _fused_adamw).
void run_pytorch(benchmark::State& state, Kind kind) {
  Model model;
  std::vector<torch::Tensor> exp_avgs, exp_avg_sqs, steps, buffers;
  for (const torch::Tensor& p : model.params) {
    if (kind == Kind::kSgd) {
      buffers.push_back(torch::zeros_like(p));
    } else {
      exp_avgs.push_back(torch::zeros_like(p));
      exp_avg_sqs.push_back(torch::zeros_like(p));
      steps.push_back(torch::zeros({}, torch::kFloat));
    }
  }
  torch::Tensor scale = torch::full({}, kScale, torch::kFloat);
  torch::Tensor tracker = torch::zeros({}, torch::kInt), found_inf = torch::zeros({});
  bool first_step = true;
  time_steps(state, model, kind, [&] {
    // unscale_
    found_inf.zero_();
    const torch::Tensor inv = scale.to(torch::kDouble).reciprocal().to(torch::kFloat);
    at::_amp_foreach_non_finite_check_and_unscale_(model.grads, found_inf, inv);
    // clip_grad_norm_(params, max_norm, foreach=True)
    const std::vector<torch::Tensor> norms = at::_foreach_norm(model.grads, 2);
    const torch::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
    const torch::Tensor coef = at::clamp_max(at::reciprocal(total + 1e-6) * kMaxNorm, 1.0);
    at::_foreach_mul_(model.grads, coef);
    // step with found_inf (no grad_scale: unscale_ ran), then update
    if (kind == Kind::kSgd) {
      at::_fused_sgd_(model.params, model.grads, buffers, 0.0, kMomentum, kLr, 0.0,
                      /*nesterov=*/false, /*maximize=*/false, first_step, {}, found_inf);
      first_step = false;
    } else {
      at::_foreach_add_(steps, 1);
      at::_fused_adamw_(model.params, model.grads, exp_avgs, exp_avg_sqs, {}, steps, kLr, 0.9,
                        0.999, kWeightDecay, 1e-8, /*amsgrad=*/false, /*maximize=*/false, {},
                        found_inf);
      at::_foreach_sub_(steps, std::vector<torch::Tensor>(steps.size(), found_inf));
    }
    at::_amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2000);
  });
}

void BM_clip_pytorch_AdamW(benchmark::State& state) { run_pytorch(state, Kind::kAdamW); }
void BM_clip_pytorch_Sgd(benchmark::State& state) { run_pytorch(state, Kind::kSgd); }
#endif

// What a LibTorch user writes today: unscale_, LibTorch's C++ clip (a host sync), the fused step.
void BM_clip_libtorch_cpp_AdamW(benchmark::State& state) {
  Model model;
  auto optimizer = make_fused(Kind::kAdamW, model);
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(kScale));
  scaler.scale(torch::ones({}));
  time_steps(state, model, Kind::kAdamW, [&] {
    scaler.unscale_(*optimizer);
    torch::nn::utils::clip_grad_norm_(model.params, kMaxNorm);
    scaler.step(*optimizer);
    scaler.update();
  });
}

}  // namespace

#define MIXPREC_BENCH(fn)                                                             \
  BENCHMARK(fn)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(5)->Repetitions(7) \
      ->ReportAggregatesOnly(true)

MIXPREC_BENCH(BM_clip_mixprec_AdamW);
MIXPREC_BENCH(BM_noclip_mixprec_AdamW);
MIXPREC_BENCH(BM_clip_libtorch_cpp_AdamW);
MIXPREC_BENCH(BM_clip_mixprec_Sgd);
MIXPREC_BENCH(BM_noclip_mixprec_Sgd);
#if MIXPREC_TORCH_CPU_AMP_KERNELS
MIXPREC_BENCH(BM_clip_pytorch_AdamW);
MIXPREC_BENCH(BM_clip_pytorch_Sgd);
#endif

int main(int argc, char** argv) {
  // Both libraries on every hardware thread (as bench/optim_benchmark.cpp).
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  mixprec::core::set_num_threads(threads);
  benchmark::AddCustomContext("threads", std::to_string(threads));
  // Repetitions interleaved across the benchmarks unless the command line says otherwise.
  std::vector<char*> args(argv, argv + argc);
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  args.insert(args.begin() + 1, interleave.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
