// Benchmarks of the CPU unscale-and-check kernel beside this machine's ceilings (memcpy and a
// plain in-place scale loop over the same bytes), the LibTorch code users write by hand, and, on
// LibTorch >= 2.4, PyTorch's own kernel (at::_amp_foreach_non_finite_check_and_unscale_) on the
// same buffers. scripts/bench.sh runs them once and prints the ratios of that run
// (bench/ratios.py).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "cpu/unscale_targets.h"
#include "mixprec/core/half.h"
#include "mixprec/core/diagnostics.h"
#include "mixprec/core/kernels.h"

#ifdef MIXPREC_BENCH_WITH_TORCH
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include "mixprec/torch_version.h"
#if MIXPREC_TORCH_CPU_AMP_KERNELS
#define MIXPREC_BENCH_PYTORCH_KERNELS  // PyTorch's CPU AMP kernels exist from 2.4 on
#endif
#endif

namespace {

namespace core = mixprec::core;

constexpr std::int64_t kBig = std::int64_t{64} << 20;    // elements of the one big tensor
constexpr std::int64_t kSmall = std::int64_t{16} << 10;  // elements of each small tensor
constexpr int kSmallCount = 4096;                        // 4096 x 16K = 64M as well

// The scale alternates 0.5 and 2 across iterations: as cheap as any other scale, exact, and
// values stay normal however long the benchmark runs (a constant scale < 1 would drift them into
// subnormals, which are slow on x86 and would skew every timing).
float inv_for(std::int64_t iteration) { return iteration % 2 == 0 ? 0.5f : 2.0f; }

int threads() { return core::get_num_threads(); }

// 64-byte aligned, first touched by the benchmark threads, filled with finite values in
// [-2, -1] U [1, 2] as stored bits of `Storage` (float, fp16 or bf16).
template <typename Storage>
Storage* make_buffer(std::int64_t n, unsigned seed) {
  const std::size_t bytes = (static_cast<std::size_t>(n) * sizeof(Storage) + 63) / 64 * 64;
  auto* p = static_cast<Storage*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) std::abort();
#pragma omp parallel num_threads(threads())
  {
    std::mt19937 rng(seed + static_cast<unsigned>(omp_get_thread_num()));
    std::uniform_real_distribution<float> unit(1.0f, 2.0f);
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = (rng() & 1) ? unit(rng) : -unit(rng);
      if constexpr (sizeof(Storage) == 4) {
        p[i] = v;
      } else {
        p[i] = static_cast<Storage>(seed % 2 == 0 ? core::float_to_half_bits(v)
                                                  : core::float_to_bf16_bits(v));
      }
    }
  }
  return p;
}

// Lazily made, shared by the benchmarks that measure the same bytes; never freed.
float* big_f32() {
  static float* p = make_buffer<float>(kBig, 1);
  return p;
}
float* copy_dst() {
  static float* p = make_buffer<float>(kBig, 3);
  return p;
}
std::uint16_t* big_f16() {
  static std::uint16_t* p = make_buffer<std::uint16_t>(kBig, 4);  // even seed: fp16
  return p;
}
std::uint16_t* big_bf16() {
  static std::uint16_t* p = make_buffer<std::uint16_t>(kBig, 5);  // odd seed: bf16
  return p;
}
// kSmallCount buffers of kSmall elements; Storage and seed parity as make_buffer.
template <typename Storage>
std::vector<Storage*> make_small(unsigned first_seed) {
  std::vector<Storage*> out;
  for (int t = 0; t < kSmallCount; ++t) {
    out.push_back(make_buffer<Storage>(kSmall, first_seed + 2 * static_cast<unsigned>(t)));
  }
  return out;
}
const std::vector<float*>& small_f32() {
  static const std::vector<float*> tensors = make_small<float>(100);
  return tensors;
}
const std::vector<std::uint16_t*>& small_f16() {
  static const std::vector<std::uint16_t*> tensors = make_small<std::uint16_t>(20000);
  return tensors;
}
const std::vector<std::uint16_t*>& small_bf16() {
  static const std::vector<std::uint16_t*> tensors = make_small<std::uint16_t>(20001);
  return tensors;
}

// The benchmark cases: one big tensor or kSmallCount small ones, of one dtype.
struct Case {
  core::DType dtype;
  bool small;
};
std::vector<core::TensorView> views_of(Case c) {
  std::vector<core::TensorView> views;
  if (c.small) {
    if (c.dtype == core::DType::kFloat32) {
      for (float* p : small_f32()) views.push_back({p, kSmall, c.dtype});
    } else {
      for (std::uint16_t* p : c.dtype == core::DType::kFloat16 ? small_f16() : small_bf16()) {
        views.push_back({p, kSmall, c.dtype});
      }
    }
  } else if (c.dtype == core::DType::kFloat32) {
    views.push_back({big_f32(), kBig, c.dtype});
  } else {
    views.push_back({c.dtype == core::DType::kFloat16 ? big_f16() : big_bf16(), kBig, c.dtype});
  }
  return views;
}
std::int64_t bytes_of(Case c) { return kBig * (c.dtype == core::DType::kFloat32 ? 4 : 2); }

void finish(benchmark::State& state, std::int64_t bytes, bool found) {
  if (found) state.SkipWithError("found a non-finite value in finite data");
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["threads"] = threads();
}

// ---- the machine's ceilings -------------------------------------------------------------------

void BM_memcpy_fp32_64M(benchmark::State& state) {
  const float* src = big_f32();
  float* dst = copy_dst();
  const int n_threads = threads();
  for (auto _ : state) {
#pragma omp parallel num_threads(n_threads)
    {
      const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::int64_t begin = kBig * t / nt, end = kBig * (t + 1) / nt;
      std::memcpy(dst + begin, src + begin, static_cast<std::size_t>(end - begin) * sizeof(float));
    }
    benchmark::ClobberMemory();
  }
  finish(state, kBig * 4, false);
}

void BM_scale_loop_fp32_64M(benchmark::State& state) {
  float* p = big_f32();
  const int n_threads = threads();
  std::int64_t iteration = 0;
  for (auto _ : state) {
    const float s = inv_for(iteration++);
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (std::int64_t i = 0; i < kBig; ++i) p[i] *= s;
    benchmark::ClobberMemory();
  }
  finish(state, kBig * 4, false);
}

// ---- mixprec ---------------------------------------------------------------------------------

void run_mixprec(benchmark::State& state, const std::vector<core::TensorView>& views,
                 std::int64_t bytes, bool check_only) {
  float found = 0.0f;
  std::int64_t iteration = 0;
  for (auto _ : state) {
    const float inv = check_only ? 1.0f : inv_for(iteration++);
    core::non_finite_check_and_unscale_(views, &found, &inv);
    benchmark::ClobberMemory();
  }
  finish(state, bytes, found != 0.0f);
}

void run_mixprec(benchmark::State& state, Case c, bool check_only) {
  run_mixprec(state, views_of(c), bytes_of(c), check_only);
}

constexpr Case kF32{core::DType::kFloat32, false}, kF32Small{core::DType::kFloat32, true};
constexpr Case kF16{core::DType::kFloat16, false}, kF16Small{core::DType::kFloat16, true};
constexpr Case kBF16{core::DType::kBFloat16, false}, kBF16Small{core::DType::kBFloat16, true};

void BM_mixprec_fp32_64M(benchmark::State& state) { run_mixprec(state, kF32, false); }
void BM_mixprec_check_only_fp32_64M(benchmark::State& state) { run_mixprec(state, kF32, true); }
void BM_mixprec_fp32_4096x16K(benchmark::State& state) { run_mixprec(state, kF32Small, false); }
void BM_mixprec_fp16_64M(benchmark::State& state) { run_mixprec(state, kF16, false); }
void BM_mixprec_fp16_4096x16K(benchmark::State& state) { run_mixprec(state, kF16Small, false); }
void BM_mixprec_bf16_64M(benchmark::State& state) { run_mixprec(state, kBF16, false); }
void BM_mixprec_bf16_4096x16K(benchmark::State& state) { run_mixprec(state, kBF16Small, false); }

// The extra pass GradScaler's opt-in overflow diagnostics make on an overflow step only.
void BM_diagnose_scan_fp32_64M(benchmark::State& state) {
  const core::TensorView view{big_f32(), kBig, core::DType::kFloat32};
  std::int64_t found = 0;
  for (auto _ : state) {
    found += core::count_nonfinite(view).inf_count;
    benchmark::ClobberMemory();
  }
  finish(state, kBig * 4, found != 0);
}

#ifdef MIXPREC_BENCH_WITH_TORCH
// ---- LibTorch, as users write it by hand (LibTorch 1.13 has no CPU kernel of its own for
// _amp_foreach_non_finite_check_and_unscale_) ------------------------------------------------

std::vector<torch::Tensor> torch_views(bool small) {
  std::vector<torch::Tensor> out;
  if (small) {
    for (float* p : small_f32()) out.push_back(torch::from_blob(p, {kSmall}, torch::kFloat));
  } else {
    out.push_back(torch::from_blob(big_f32(), {kBig}, torch::kFloat));
  }
  return out;
}

// for g in grads: g.mul_(inv); found |= not g.isfinite().all()
void run_torch_naive(benchmark::State& state, bool small) {
  std::vector<torch::Tensor> grads = torch_views(small);
  torch::Tensor inv = torch::ones({}, torch::kFloat);
  bool found = false;
  std::int64_t iteration = 0;
  for (auto _ : state) {
    inv.fill_(inv_for(iteration++));
    for (torch::Tensor& g : grads) {
      g.mul_(inv);
      found |= !g.isfinite().all().item<bool>();
    }
  }
  finish(state, kBig * 4, found);
}

// at::_foreach_mul_(grads, inv), then the same isfinite check per tensor.
void run_torch_foreach(benchmark::State& state, bool small) {
  std::vector<torch::Tensor> grads = torch_views(small);
  bool found = false;
  std::int64_t iteration = 0;
  for (auto _ : state) {
    at::_foreach_mul_(grads, at::Scalar(static_cast<double>(inv_for(iteration++))));
    for (const torch::Tensor& g : grads) found |= !g.isfinite().all().item<bool>();
  }
  finish(state, kBig * 4, found);
}

#ifdef MIXPREC_BENCH_PYTORCH_KERNELS
// PyTorch's own kernel on the same buffers, as torch.amp.GradScaler("cpu").unscale_ calls it.
void run_pytorch(benchmark::State& state, Case c, bool check_only) {
  const auto dtype = c.dtype == core::DType::kFloat32   ? torch::kFloat
                     : c.dtype == core::DType::kFloat16 ? torch::kHalf
                                                        : torch::kBFloat16;
  std::vector<torch::Tensor> grads;
  for (const core::TensorView& v : views_of(c)) {
    grads.push_back(torch::from_blob(v.data, {v.numel}, dtype));
  }
  torch::Tensor found = torch::zeros({}, torch::kFloat), inv = torch::ones({}, torch::kFloat);
  std::int64_t iteration = 0;
  for (auto _ : state) {
    inv.fill_(check_only ? 1.0f : inv_for(iteration++));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv);
    benchmark::ClobberMemory();
  }
  finish(state, bytes_of(c), found.item<float>() != 0.0f);
}

void BM_pytorch_fp32_64M(benchmark::State& state) { run_pytorch(state, kF32, false); }
void BM_pytorch_check_only_fp32_64M(benchmark::State& state) { run_pytorch(state, kF32, true); }
void BM_pytorch_fp32_4096x16K(benchmark::State& state) { run_pytorch(state, kF32Small, false); }
void BM_pytorch_fp16_64M(benchmark::State& state) { run_pytorch(state, kF16, false); }
void BM_pytorch_fp16_4096x16K(benchmark::State& state) { run_pytorch(state, kF16Small, false); }
void BM_pytorch_bf16_64M(benchmark::State& state) { run_pytorch(state, kBF16, false); }
void BM_pytorch_bf16_4096x16K(benchmark::State& state) { run_pytorch(state, kBF16Small, false); }
#endif

void BM_torch_naive_fp32_64M(benchmark::State& state) { run_torch_naive(state, false); }
void BM_torch_naive_fp32_4096x16K(benchmark::State& state) { run_torch_naive(state, true); }
void BM_torch_foreach_fp32_64M(benchmark::State& state) { run_torch_foreach(state, false); }
void BM_torch_foreach_fp32_4096x16K(benchmark::State& state) { run_torch_foreach(state, true); }
#endif

// Wall-clock time: the work runs on several threads.
#define MIXPREC_BENCH(fn) BENCHMARK(fn)->UseRealTime()->Unit(benchmark::kMillisecond)

MIXPREC_BENCH(BM_memcpy_fp32_64M);
MIXPREC_BENCH(BM_scale_loop_fp32_64M);
MIXPREC_BENCH(BM_mixprec_fp32_64M);
MIXPREC_BENCH(BM_mixprec_check_only_fp32_64M);
MIXPREC_BENCH(BM_mixprec_fp32_4096x16K);
MIXPREC_BENCH(BM_mixprec_fp16_64M);
MIXPREC_BENCH(BM_mixprec_fp16_4096x16K);
MIXPREC_BENCH(BM_mixprec_bf16_64M);
MIXPREC_BENCH(BM_mixprec_bf16_4096x16K);
MIXPREC_BENCH(BM_diagnose_scan_fp32_64M);
#ifdef MIXPREC_BENCH_PYTORCH_KERNELS
MIXPREC_BENCH(BM_pytorch_fp32_64M);
MIXPREC_BENCH(BM_pytorch_check_only_fp32_64M);
MIXPREC_BENCH(BM_pytorch_fp32_4096x16K);
MIXPREC_BENCH(BM_pytorch_fp16_64M);
MIXPREC_BENCH(BM_pytorch_fp16_4096x16K);
MIXPREC_BENCH(BM_pytorch_bf16_64M);
MIXPREC_BENCH(BM_pytorch_bf16_4096x16K);
#endif
#ifdef MIXPREC_BENCH_WITH_TORCH
MIXPREC_BENCH(BM_torch_naive_fp32_64M);
MIXPREC_BENCH(BM_torch_naive_fp32_4096x16K);
MIXPREC_BENCH(BM_torch_foreach_fp32_64M);
MIXPREC_BENCH(BM_torch_foreach_fp32_4096x16K);
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef MIXPREC_BENCH_WITH_TORCH
  at::set_num_threads(threads());  // LibTorch gets the same threads as mixprec
#endif
  benchmark::AddCustomContext("mixprec_threads", std::to_string(threads()));
  benchmark::AddCustomContext(
      "mixprec_simd_target",
      core::cpu::simd_target_name(core::cpu::dispatched_simd_target()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
