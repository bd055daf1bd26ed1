// GPU benchmarks, side by side in one run on the same tensors (CUDA events, manual time):
//  * unscale-and-check: mixprec::non_finite_check_and_unscale_ vs PyTorch's
//    at::_amp_foreach_non_finite_check_and_unscale_, on fp32 1 x 64M, fp32 4096 x 16K, fp16 and
//    bf16 4096 x 16K lists; the ceiling is a device-to-device copy of the same bytes (each kernel
//    reads and writes every element once, so does the copy).
//  * a GradScaler-driven AdamW step on GPT-2-small-like parameters (~124M fp32): mixprec's fused
//    AdamW via GradScaler::step, PyTorch's fused path as Python runs it for AdamW(fused=True)
//    (check pass + at::_fused_adamw_ with grad_scale/found_inf + _amp_update_scale_; LibTorch 2.x
//    only), and torch::optim::AdamW after scaler.unscale_ (what LibTorch users write today);
//    the ceiling is a copy of the bytes the step moves (param, grad, exp_avg, exp_avg_sq, read
//    and written once).
// Each benchmark reports GB/s (bytes credited / measured device time) and bytes_MB; ratios are
// made from the JSON output by scripts/gpu_check.sh. A PyTorch kernel that rejects a dtype is
// reported as an error ("unsupported by PyTorch: ..."), not a crash.
// Usage: gpu_benchmark [Google Benchmark flags]; needs a CUDA device (exit code 1 without one).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <benchmark/benchmark.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpt2_shapes.h"

namespace {

using torch::Tensor;

const torch::Device kCuda(torch::kCUDA, 0);

/// Runs `body(i)` once untimed, then once per benchmark iteration between two CUDA events on the
/// current stream; `prepare(i)` runs before each timed call, outside the events (e.g. re-scaling
/// gradients). Sets the iteration time to the events' elapsed time and the GB/s counter to
/// `bytes` per iteration over the summed device time.
void timed_loop(benchmark::State& state, double bytes, const std::function<void(int64_t)>& body,
                const std::function<void(int64_t)>& prepare = nullptr) {
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  if (prepare) prepare(0);
  body(0);  // warm-up: lazy state, allocator, cuBLAS/launch caches
  torch::cuda::synchronize();
  double total_s = 0.0;
  std::int64_t i = 0;
  for (auto _ : state) {
    ++i;
    if (prepare) prepare(i);
    start.record();
    body(i);
    stop.record();
    stop.synchronize();
    const double s = static_cast<double>(start.elapsed_time(stop)) / 1e3;
    state.SetIterationTime(s);
    total_s += s;
  }
  state.counters["GB/s"] = total_s > 0 ? bytes * static_cast<double>(i) / total_s / 1e9 : 0.0;
  state.counters["bytes_MB"] = bytes / 1e6;
}

// ---- unscale-and-check ------------------------------------------------------------------------

struct ListCase {
  const char* name;
  torch::Dtype dtype;
  std::int64_t count;  // tensors in the list
  std::int64_t numel;  // elements per tensor
};

const ListCase kListCases[] = {
    {"fp32_1x64M", torch::kFloat, 1, 64 << 20},
    {"fp32_4096x16K", torch::kFloat, 4096, 16 << 10},
    {"fp16_4096x16K", torch::kHalf, 4096, 16 << 10},
    {"bf16_4096x16K", torch::kBFloat16, 4096, 16 << 10},
};

/// The one list of a case, created on first use and shared by every variant (finite values).
/// Never destroyed: CUDA tensors must not be freed by static destructors after the driver has
/// begun shutting down at exit.
std::vector<Tensor>& list_of(const ListCase& c) {
  static auto* lists = new std::map<std::string, std::vector<Tensor>>();
  auto& list = (*lists)[c.name];
  if (list.empty()) {
    torch::manual_seed(0);
    const Tensor flat = torch::randn({c.count * c.numel}, torch::device(kCuda).dtype(c.dtype));
    for (std::int64_t t = 0; t < c.count; ++t) list.push_back(flat.narrow(0, t * c.numel, c.numel));
  }
  return list;
}

double list_bytes(const ListCase& c) {  // every element read and written once
  return 2.0 * static_cast<double>(c.count * c.numel) *
         static_cast<double>(c10::elementSize(c.dtype));
}

/// inv_scale alternates between 0.5 and 2 (powers of two: values stay as they were after every
/// pair, so no variant works on subnormals or zeros the others did not see).
/// (Never destroyed, as list_of.)
Tensor inv_scale_for(std::int64_t i) {
  static const auto* scales = new std::vector<Tensor>{
      torch::full({1}, 0.5, torch::device(kCuda).dtype(torch::kFloat)),
      torch::full({1}, 2.0, torch::device(kCuda).dtype(torch::kFloat))};
  return (*scales)[static_cast<std::size_t>(i % 2)];
}

void BM_UnscaleMixprec(benchmark::State& state, ListCase c) {
  std::vector<Tensor>& list = list_of(c);
  Tensor found_inf = torch::zeros({1}, torch::device(kCuda).dtype(torch::kFloat));
  timed_loop(state, list_bytes(c), [&](std::int64_t i) {
    mixprec::non_finite_check_and_unscale_(list, found_inf, inv_scale_for(i));
  });
}

void BM_UnscaleTorch(benchmark::State& state, ListCase c) {
  std::vector<Tensor>& list = list_of(c);
  Tensor found_inf = torch::zeros({1}, torch::device(kCuda).dtype(torch::kFloat));
  try {  // one call on a one-tensor list first: dtypes PyTorch has no kernel for throw here
    std::vector<Tensor> probe{torch::ones({4}, torch::device(kCuda).dtype(c.dtype))};
    at::_amp_foreach_non_finite_check_and_unscale_(probe, found_inf, inv_scale_for(0));
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    state.SkipWithError(("unsupported by PyTorch: " + what.substr(0, what.find('\n'))).c_str());
    return;
  }
  timed_loop(state, list_bytes(c), [&](std::int64_t i) {
    at::_amp_foreach_non_finite_check_and_unscale_(list, found_inf, inv_scale_for(i));
  });
}

void BM_UnscaleCopyCeiling(benchmark::State& state, ListCase c) {
  // One flat copy of the list's bytes: reads and writes as much as the kernels do.
  const std::int64_t bytes = c.count * c.numel * static_cast<std::int64_t>(c10::elementSize(c.dtype));
  const Tensor src = torch::ones({bytes}, torch::device(kCuda).dtype(torch::kUInt8));
  Tensor dst = torch::empty_like(src);
  timed_loop(state, list_bytes(c), [&](std::int64_t) { dst.copy_(src); });
}

// ---- AdamW step with GradScaler ---------------------------------------------------------------

using mixprec_bench::gpt2_small_shapes;

/// fp32 parameters with small gradients on the GPU; *numel gets the total element count.
std::vector<Tensor> make_params(std::int64_t* numel) {
  torch::manual_seed(0);
  std::vector<Tensor> params;
  *numel = 0;
  for (const auto& shape : gpt2_small_shapes()) {
    params.push_back((torch::randn(shape, torch::device(kCuda)) * 0.02).requires_grad_());
    params.back().mutable_grad() = torch::randn(shape, torch::device(kCuda)) * 1e-3;
    *numel += params.back().numel();
  }
  return params;
}

std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  return grads;
}

/// param, grad, exp_avg, exp_avg_sq (fp32) each read and written once per step.
double adamw_bytes(std::int64_t numel) { return 8.0 * 4.0 * static_cast<double>(numel); }

const auto kAdamW = torch::optim::AdamWOptions(1e-3).weight_decay(0.01);
constexpr double kScale = 65536.0;  // GradScaler's default; no growth within 2000 iterations

void BM_AdamWMixprecFused(benchmark::State& state) {
  std::int64_t numel = 0;
  std::vector<Tensor> params = make_params(&numel);
  std::vector<Tensor> grads = grads_of(params);
  mixprec::optim::AdamW opt(params, kAdamW);
  mixprec::GradScaler scaler;
  scaler.scale(torch::ones({}, torch::device(kCuda)));  // creates the scale on the GPU
  timed_loop(
      state, adamw_bytes(numel),
      [&](std::int64_t) {
        scaler.step(opt);  // unscale + check + update in the fused pass, no host sync
        scaler.update();
      },
      // The step unscales the grads in place: scale them back as backward() of a scaled loss
      // would (exact, a power of two), outside the timed region.
      [&](std::int64_t) { at::_foreach_mul_(grads, kScale); });
}

void BM_AdamWTorchUnscale(benchmark::State& state) {
  std::int64_t numel = 0;
  std::vector<Tensor> params = make_params(&numel);
  std::vector<Tensor> grads = grads_of(params);
  torch::optim::AdamW opt(params, kAdamW);
  mixprec::GradScaler scaler;
  scaler.scale(torch::ones({}, torch::device(kCuda)));
  timed_loop(
      state, adamw_bytes(numel),
      [&](std::int64_t) {
        scaler.unscale_(opt);  // separate unscale pass, then a host read of found_inf
        scaler.step(opt);
        scaler.update();
      },
      [&](std::int64_t) { at::_foreach_mul_(grads, kScale); });
}

#if MIXPREC_TORCH_2
/// What Python's GradScaler.step does for torch.optim.AdamW(fused=True): a check-only pass over
/// the grads (inv_scale 1), state_steps += 1, at::_fused_adamw_ with grad_scale and found_inf
/// (it unscales and skips on found_inf itself), state_steps -= found_inf, then update().
void BM_AdamWTorchFused(benchmark::State& state) {
  std::int64_t numel = 0;
  std::vector<Tensor> params = make_params(&numel);
  std::vector<Tensor> grads = grads_of(params);
  std::vector<Tensor> exp_avgs, exp_avg_sqs, steps, found_infs;
  for (const Tensor& p : params) {
    exp_avgs.push_back(torch::zeros_like(p));
    exp_avg_sqs.push_back(torch::zeros_like(p));
    steps.push_back(torch::zeros({}, torch::device(kCuda).dtype(torch::kFloat)));
  }
  const auto f32 = torch::device(kCuda).dtype(torch::kFloat);
  Tensor scale = torch::full({}, kScale, f32);
  Tensor tracker = torch::zeros({}, torch::device(kCuda).dtype(torch::kInt));
  Tensor found_inf = torch::zeros({}, f32);
  const Tensor one = torch::ones({}, f32);
  const double beta1 = std::get<0>(kAdamW.betas()), beta2 = std::get<1>(kAdamW.betas());
  timed_loop(
      state, adamw_bytes(numel),
      [&](std::int64_t) {
        torch::NoGradGuard no_grad;  // in-place updates of leaves, as optimizer.step() runs
        found_inf.zero_();
        at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, one);
        at::_foreach_add_(steps, 1);
        at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, kAdamW.lr(), beta1,
                          beta2, kAdamW.weight_decay(), kAdamW.eps(), /*amsgrad=*/false,
                          /*maximize=*/false, scale, found_inf);
        found_infs.assign(steps.size(), found_inf);
        at::_foreach_sub_(steps, found_infs);
        at::_amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2000);
      },
      [&](std::int64_t) { at::_foreach_mul_(grads, kScale); });
}
#else
void BM_AdamWTorchFused(benchmark::State& state) {
  state.SkipWithError("unsupported by PyTorch: at::_fused_adamw_ needs LibTorch 2.x");
}
#endif

void BM_AdamWCopyCeiling(benchmark::State& state) {
  std::int64_t numel = 0;
  for (const auto& shape : gpt2_small_shapes()) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    numel += n;
  }
  // 4 fp32 arrays of numel elements copied: 16 bytes read + 16 written per parameter.
  const Tensor src = torch::ones({4 * numel}, torch::device(kCuda));
  Tensor dst = torch::empty_like(src);
  timed_loop(state, adamw_bytes(numel), [&](std::int64_t) { dst.copy_(src); });
}

void register_all() {
  for (const ListCase& c : kListCases) {
    const std::string n = c.name;
    benchmark::RegisterBenchmark(("unscale/copy_ceiling/" + n).c_str(), BM_UnscaleCopyCeiling, c)
        ->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(200);
    benchmark::RegisterBenchmark(("unscale/mixprec/" + n).c_str(), BM_UnscaleMixprec, c)
        ->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(200);
    benchmark::RegisterBenchmark(("unscale/torch/" + n).c_str(), BM_UnscaleTorch, c)
        ->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(200);
  }
  benchmark::RegisterBenchmark("adamw/copy_ceiling/gpt2_124M", BM_AdamWCopyCeiling)
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);
  benchmark::RegisterBenchmark("adamw/mixprec_fused/gpt2_124M", BM_AdamWMixprecFused)
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);
  benchmark::RegisterBenchmark("adamw/torch_fused/gpt2_124M", BM_AdamWTorchFused)
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);
  benchmark::RegisterBenchmark("adamw/torch_optim_unscale/gpt2_124M", BM_AdamWTorchUnscale)
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "gpu_benchmark: no CUDA device; these benchmarks need a GPU\n");
    return 1;
  }
  std::fprintf(stderr, "gpu_benchmark: %s, LibTorch %s\n",
               at::cuda::getCurrentDeviceProperties()->name, TORCH_VERSION);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
