// Benchmarks of the CPU FP8 kernels beside this machine's ceiling for the same traffic (a plain
// loop reading 4 bytes and writing 1 byte per element, or the reverse for dequantize) and, on
// LibTorch >= 2.1 (float8 dtypes), the op chain a LibTorch user writes by hand:
// x.abs().max() then x.mul(scale).clamp(-448, 448).to(kFloat8_e4m3fn). Sizes 1M, 16M and 64M
// fp32 elements. The headline is amax-and-quantize (delayed scaling's cast) against the loop.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "cpu/fp8_simd.h"
#include "cpu/unscale_targets.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/kernels.h"

#ifdef MIXPREC_BENCH_WITH_TORCH
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "mixprec/torch_version.h"
#if MIXPREC_TORCH_FP8
#define MIXPREC_BENCH_TORCH_FP8  // at::kFloat8_e4m3fn exists from 2.1 on
#endif
#endif

namespace {

namespace core = mixprec::core;

constexpr std::int64_t kMax = std::int64_t{64} << 20;  // the largest size, elements
constexpr float kScale = 448.0f / 2.0f;                // the data's amax is 2

int threads() { return core::get_num_threads(); }

// 64-byte aligned, first touched by the benchmark threads (so pages are spread as they are used).
template <typename T>
T* make_buffer(std::int64_t n) {
  const std::size_t bytes = (static_cast<std::size_t>(n) * sizeof(T) + 63) / 64 * 64;
  auto* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) std::abort();
#pragma omp parallel for num_threads(threads()) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) p[i] = T{};
  return p;
}

// Lazily made, shared by all benchmarks, never freed: x in [-2, -1] U [1, 2], its codes, and a
// float output for dequantize.
float* input() {
  static float* p = [] {
    float* x = make_buffer<float>(kMax);
#pragma omp parallel num_threads(threads())
    {
      std::mt19937 rng(1 + static_cast<unsigned>(omp_get_thread_num()));
      std::uniform_real_distribution<float> unit(1.0f, 2.0f);
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < kMax; ++i) x[i] = (rng() & 1) ? unit(rng) : -unit(rng);
    }
    return x;
  }();
  return p;
}
std::uint8_t* codes() {
  static std::uint8_t* p = [] {
    std::uint8_t* q = make_buffer<std::uint8_t>(kMax);
    core::quantize_fp8_({input(), kMax, core::DType::kFloat32}, q, core::Fp8Format::kE4M3, &kScale);
    return q;
  }();
  return p;
}
float* output() {
  static float* p = make_buffer<float>(kMax);
  return p;
}

void finish(benchmark::State& state, std::int64_t bytes_per_element) {
  state.SetBytesProcessed(state.iterations() * state.range(0) * bytes_per_element);
  state.counters["threads"] = threads();
}

// ---- the machine's ceilings -------------------------------------------------------------------

// Reads 4 bytes and writes 1 per element (the top byte of each float): quantize's traffic.
void BM_loop_4to1(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto* src = reinterpret_cast<const std::uint32_t*>(input());
  std::uint8_t* dst = codes();
  const int n_threads = threads();
  for (auto _ : state) {
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint8_t>(src[i] >> 24);
    benchmark::ClobberMemory();
  }
  finish(state, 5);
}

// Reads 1 byte and writes 4 per element: dequantize's traffic.
void BM_loop_1to4(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const std::uint8_t* src = codes();
  auto* dst = reinterpret_cast<std::uint32_t*>(output());
  const int n_threads = threads();
  for (auto _ : state) {
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint32_t>(src[i]) << 24;
    benchmark::ClobberMemory();
  }
  finish(state, 5);
}

// ---- mixprec ---------------------------------------------------------------------------------

core::TensorView x_view(std::int64_t n) { return {input(), n, core::DType::kFloat32}; }

// Delayed scaling's cast: quantize with this iteration's scale, recording amax in the same pass.
void BM_mixprec_amax_quantize_e4m3(benchmark::State& state) {
  const core::TensorView x = x_view(state.range(0));
  float amax = 0.0f;
  for (auto _ : state) {
    amax = 0.0f;
    core::quantize_fp8_(x, codes(), core::Fp8Format::kE4M3, &kScale, &amax);
    benchmark::ClobberMemory();
  }
  if (!(amax > 1.9f && amax <= 2.0f)) {
    state.SkipWithError("amax is not that of the data");
  }
  finish(state, 5);
}

void BM_mixprec_quantize_e4m3(benchmark::State& state) {
  const core::TensorView x = x_view(state.range(0));
  for (auto _ : state) {
    core::quantize_fp8_(x, codes(), core::Fp8Format::kE4M3, &kScale);
    benchmark::ClobberMemory();
  }
  finish(state, 5);
}

void BM_mixprec_amax(benchmark::State& state) {
  const core::TensorView x = x_view(state.range(0));
  for (auto _ : state) {
    float amax = 0.0f;
    core::amax_(x, &amax);
    benchmark::DoNotOptimize(amax);
  }
  finish(state, 4);
}

// Current scaling: amax, scale, then quantize (two reads of x).
void BM_mixprec_quantize_current_e4m3(benchmark::State& state) {
  const core::TensorView x = x_view(state.range(0));
  const core::CurrentScaling rule;
  float scale = 0.0f, scale_inv = 0.0f, amax = 0.0f;
  for (auto _ : state) {
    core::quantize_fp8_current_(x, codes(), core::Fp8Format::kE4M3, rule, &scale, &scale_inv,
                                &amax);
    benchmark::ClobberMemory();
  }
  finish(state, 5);
}

void BM_mixprec_quantize_mxfp8_e4m3(benchmark::State& state) {
  const core::TensorView x = x_view(state.range(0));
  static std::uint8_t* scales = make_buffer<std::uint8_t>(kMax / 32);
  for (auto _ : state) {
    core::quantize_mxfp8_(x, 4096, codes(), scales, core::Fp8Format::kE4M3);
    benchmark::ClobberMemory();
  }
  finish(state, 5);
}

// input() with every other 128-row band times 4: each 128 x 128 tile's scale differs from the
// scale of the tile above it (Note [Tile guesses] in src/cpu/fp8_tiles_simd.cpp).
float* unlike_input() {
  static float* p = [] {
    float* x = make_buffer<float>(kMax);
    const float* in = input();
#pragma omp parallel for num_threads(threads()) schedule(static)
    for (std::int64_t i = 0; i < kMax; ++i)
      x[i] = in[i] * (i / (4096 * 128) % 2 == 1 ? 4.0f : 1.0f);
    return x;
  }();
  return p;
}

// Tile scaling (rows of 4096): torchao's rowwise (a scale per row), TE's 1x128 and 128x128 tiles.
void quantize_tiles(benchmark::State& state, std::int64_t tile_rows, std::int64_t tile_cols,
                    float* data = input()) {
  const core::TensorView x{data, state.range(0), core::DType::kFloat32};
  static float* scale_inv = make_buffer<float>(kMax);
  core::CurrentScaling rule;
  rule.power_of_2_scales = true;
  for (auto _ : state) {
    core::quantize_fp8_tiles_(x, 4096, tile_rows, tile_cols, codes(), scale_inv,
                              core::Fp8Format::kE4M3, rule);
    benchmark::ClobberMemory();
  }
  finish(state, 5);
}
void BM_mixprec_quantize_rowwise_e4m3(benchmark::State& state) { quantize_tiles(state, 1, 4096); }
void BM_mixprec_quantize_1x128_e4m3(benchmark::State& state) { quantize_tiles(state, 1, 128); }
void BM_mixprec_quantize_128x128_e4m3(benchmark::State& state) { quantize_tiles(state, 128, 128); }
void BM_mixprec_quantize_128x128_unlike_e4m3(benchmark::State& state) {
  quantize_tiles(state, 128, 128, unlike_input());
}

void BM_mixprec_dequantize_e4m3(benchmark::State& state) {
  const core::TensorView out{output(), state.range(0), core::DType::kFloat32};
  const float scale_inv = 1.0f / kScale;
  for (auto _ : state) {
    core::dequantize_fp8_(codes(), core::Fp8Format::kE4M3, &scale_inv, out);
    benchmark::ClobberMemory();
  }
  finish(state, 5);
}

#ifdef MIXPREC_BENCH_TORCH_FP8
// ---- LibTorch, as users write it by hand ------------------------------------------------------

torch::Tensor torch_x(std::int64_t n) { return torch::from_blob(input(), {n}, torch::kFloat); }

// amax = x.abs().max(); q = x.mul(scale).clamp(-448, 448).to(kFloat8_e4m3fn)
void BM_torch_amax_quantize_e4m3(benchmark::State& state) {
  const torch::Tensor x = torch_x(state.range(0));
  const torch::Tensor scale = torch::full({}, kScale);
  for (auto _ : state) {
    torch::Tensor amax = x.abs().max();
    torch::Tensor q = x.mul(scale).clamp(-448, 448).to(at::kFloat8_e4m3fn);
    benchmark::DoNotOptimize(amax.data_ptr());
    benchmark::DoNotOptimize(q.data_ptr());
  }
  finish(state, 5);
}

// x' = q.to(kFloat).mul(scale_inv)
void BM_torch_dequantize_e4m3(benchmark::State& state) {
  const torch::Tensor q =
      torch::from_blob(codes(), {state.range(0)}, torch::dtype(at::kFloat8_e4m3fn));
  const torch::Tensor scale_inv = torch::full({}, 1.0f / kScale);
  for (auto _ : state) {
    torch::Tensor out = q.to(torch::kFloat).mul(scale_inv);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  finish(state, 5);
}
#endif

// Wall-clock time (several threads); 1M, 16M and 64M elements.
#define MIXPREC_BENCH(fn)             \
  BENCHMARK(fn)                       \
      ->UseRealTime()                 \
      ->Unit(benchmark::kMillisecond) \
      ->Arg(std::int64_t{1} << 20)    \
      ->Arg(std::int64_t{16} << 20)   \
      ->Arg(kMax)

MIXPREC_BENCH(BM_loop_4to1);
MIXPREC_BENCH(BM_mixprec_amax_quantize_e4m3);
MIXPREC_BENCH(BM_mixprec_quantize_e4m3);
MIXPREC_BENCH(BM_mixprec_amax);
MIXPREC_BENCH(BM_mixprec_quantize_current_e4m3);
MIXPREC_BENCH(BM_mixprec_quantize_mxfp8_e4m3);
MIXPREC_BENCH(BM_mixprec_quantize_rowwise_e4m3);
MIXPREC_BENCH(BM_mixprec_quantize_1x128_e4m3);
MIXPREC_BENCH(BM_mixprec_quantize_128x128_e4m3);
MIXPREC_BENCH(BM_mixprec_quantize_128x128_unlike_e4m3);
MIXPREC_BENCH(BM_loop_1to4);
MIXPREC_BENCH(BM_mixprec_dequantize_e4m3);
#ifdef MIXPREC_BENCH_TORCH_FP8
MIXPREC_BENCH(BM_torch_amax_quantize_e4m3);
MIXPREC_BENCH(BM_torch_dequantize_e4m3);
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef MIXPREC_BENCH_WITH_TORCH
  at::set_num_threads(threads());  // LibTorch gets the same threads as mixprec
#endif
  benchmark::AddCustomContext("mixprec_threads", std::to_string(threads()));
  benchmark::AddCustomContext(
      "mixprec_simd_target",
      mixprec::core::cpu::simd_target_name(mixprec::core::cpu::fp8_dispatched_simd_target()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
