// Benchmarks of the CPU FP4 kernels beside this machine's ceiling for the traffic of a cast (the
// 4:1 loop of fp8_benchmark: read 4 bytes, write 1 per element; an FP4 cast writes 9/16 byte):
// NVFP4 1D quantize with a known per-tensor amax (the headline, as TE's delayed amax), the amax
// and quantize of a fresh tensor (two reads), NVFP4 2D, stochastic rounding, MXFP4 FLOOR, the
// RHT and the dequantizes. Sizes 16M and 64M fp32 elements; the data is normal times exp(z).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "mixprec/core/fp4.h"
#include "mixprec/core/kernels.h"

namespace {

namespace core = mixprec::core;

constexpr std::int64_t kMax = std::int64_t{64} << 20;  // the largest size, elements

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

float* input() {
  static float* p = [] {
    float* x = make_buffer<float>(kMax);
#pragma omp parallel num_threads(threads())
    {
      std::mt19937 rng(1 + static_cast<unsigned>(omp_get_thread_num()));
      std::normal_distribution<float> normal;
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < kMax; ++i) x[i] = normal(rng) * std::exp(normal(rng));
    }
    return x;
  }();
  return p;
}
std::uint8_t* bytes_out() {  // codes, or the 4:1 loop's output
  static std::uint8_t* p = make_buffer<std::uint8_t>(kMax);
  return p;
}
std::uint8_t* scales_out() {
  static std::uint8_t* p = make_buffer<std::uint8_t>(kMax / 16);
  return p;
}
float* float_out() {
  static float* p = make_buffer<float>(kMax);
  return p;
}
float tensor_amax() {
  static float a = [] {
    float found = 0.0f;
    core::amax_({input(), kMax, core::DType::kFloat32}, &found, nullptr, core::NanAmax::kIgnore);
    return found;
  }();
  return a;
}

constexpr std::int64_t kCols = 4096;
core::TensorView x_view(std::int64_t n) { return {input(), n, core::DType::kFloat32}; }

void finish(benchmark::State& state) {
  state.SetBytesProcessed(state.iterations() * state.range(0) * 4);  // the fp32 side
  state.counters["threads"] = threads();
}

// Reads 4 bytes and writes 1 per element: the FP8 casts' yardstick.
void BM_loop_4to1(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto* src = reinterpret_cast<const std::uint32_t*>(input());
  std::uint8_t* dst = bytes_out();
  const int n_threads = threads();
  for (auto _ : state) {
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint8_t>(src[i] >> 24);
    benchmark::ClobberMemory();
  }
  finish(state);
}

void nvfp4(benchmark::State& state, bool two_d, bool stochastic, bool with_amax) {
  const core::TensorView x = x_view(state.range(0));
  core::Nvfp4Options options;
  options.two_d = two_d;
  options.stochastic = stochastic;
  float amax = tensor_amax();
  for (auto _ : state) {
    if (with_amax) {
      amax = 0.0f;
      core::amax_(x, &amax, nullptr, core::NanAmax::kIgnore);
    }
    core::quantize_nvfp4_(x, kCols, &amax, bytes_out(), scales_out(), options);
    ++options.offset;
    benchmark::ClobberMemory();
  }
  finish(state);
}
void BM_nvfp4_quantize_1d(benchmark::State& state) { nvfp4(state, false, false, false); }
void BM_nvfp4_amax_and_quantize_1d(benchmark::State& state) { nvfp4(state, false, false, true); }
void BM_nvfp4_quantize_2d(benchmark::State& state) { nvfp4(state, true, false, false); }
void BM_nvfp4_quantize_1d_stochastic(benchmark::State& state) { nvfp4(state, false, true, false); }

void BM_mxfp4_quantize_floor(benchmark::State& state) {
  const core::TensorView x = x_view(state.range(0));
  for (auto _ : state) {
    core::quantize_mxfp4_(x, kCols, bytes_out(), scales_out(), core::MxScaleMode::kFloor);
    benchmark::ClobberMemory();
  }
  finish(state);
}

void BM_hadamard16(benchmark::State& state) {
  const core::TensorView x = x_view(state.range(0));
  auto* out = reinterpret_cast<std::uint16_t*>(float_out());
  for (auto _ : state) {
    core::hadamard16_(x, out);
    benchmark::ClobberMemory();
  }
  finish(state);
}

void BM_nvfp4_dequantize(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const float amax = tensor_amax();
  core::quantize_nvfp4_(x_view(n), kCols, &amax, bytes_out(), scales_out());
  for (auto _ : state) {
    core::dequantize_nvfp4_(bytes_out(), scales_out(), &amax, kCols,
                            {float_out(), n, core::DType::kFloat32});
    benchmark::ClobberMemory();
  }
  finish(state);
}

#define MIXPREC_BENCH(fn)             \
  BENCHMARK(fn)                       \
      ->UseRealTime()                 \
      ->Unit(benchmark::kMillisecond) \
      ->Arg(std::int64_t{16} << 20)   \
      ->Arg(kMax)

MIXPREC_BENCH(BM_loop_4to1);
MIXPREC_BENCH(BM_nvfp4_quantize_1d);
MIXPREC_BENCH(BM_mxfp4_quantize_floor);
MIXPREC_BENCH(BM_nvfp4_amax_and_quantize_1d);
MIXPREC_BENCH(BM_nvfp4_quantize_2d);
MIXPREC_BENCH(BM_nvfp4_quantize_1d_stochastic);
MIXPREC_BENCH(BM_hadamard16);
MIXPREC_BENCH(BM_nvfp4_dequantize);

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("mixprec_threads", std::to_string(threads()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
