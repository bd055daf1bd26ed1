// The CUDA FP8 kernels against mixprec's CPU kernels (core::*_ on CPU views), bit for bit, NaNs
// included: first their per-thread code emulated on the host (no GPU needed), then the kernels
// themselves on a device through the dispatch point (core::*_ on CUDA views): grid-stride loops
// that wrap, MX rows with short last blocks, current scaling on a stream, the delayed update over
// several launches, and a CUDA graph capture of them all (a host synchronisation would break it).
// Without a CUDA device the CudaFp8Test tests are skipped (GTEST_SKIP), never failed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/fp8_elements.cuh"
#include "cuda/fp8_test_util.h"
#include "mixprec/core/fp8.h"

namespace mixprec::core::cuda {
namespace {

using mixprec::testing::to_device;
using mixprec::testing::to_host;

// The emulated CUDA threads against mixprec's CPU kernels (core::*_ on CPU views: SIMD targets,
// OpenMP pieces), bit for bit, NaNs included: a CUDA tensor gets the bits a CPU tensor gets.
template <DType kType, Fp8Format kFormat>
void check_against_cpu(std::mt19937_64& rng) {
  using Storage = typename Fp8Io<kType>::Storage;
  SCOPED_TRACE(::testing::Message() << dtype_name(kType) << " " << fp8_format_name(kFormat));
  const std::int64_t n = 300000, cols = 100;  // several CPU pieces; MX rows with a short block
  Tensor x = random_tensor(kType, n, rng, /*specials=*/true);
  const TensorView view{x.data(), n, kType};
  const auto* data = static_cast<const Storage*>(x.data());
  std::vector<std::uint8_t> q_cpu(static_cast<std::size_t>(n)), q_cuda(q_cpu.size());
  for (float scale : {1.0f, 0.37f, 3.0e5f}) {
    float amax_cpu = 0.5f;  // accumulated into, as the delayed recipe's slot
    quantize_fp8_(view, q_cpu.data(), kFormat, &scale, &amax_cpu);
    const std::uint32_t bits = run_quantize<kType, kFormat, true>(x, q_cuda.data(), scale, 1000);
    const auto slot = std::max(static_cast<std::int32_t>(bits32(0.5f)),  // record_amax's atomicMax
                               static_cast<std::int32_t>(canonical_amax_bits(bits)));
    EXPECT_EQ(static_cast<std::uint32_t>(slot), bits32(amax_cpu)) << "scale " << scale;
    ASSERT_EQ(q_cuda, q_cpu) << "scale " << scale;
  }
  // Current scaling: amax (NaNs skipped or propagated), the scale rule in every thread, quantize.
  for (NanAmax nan : {NanAmax::kIgnore, NanAmax::kPropagate}) {
    SCOPED_TRACE(nan == NanAmax::kIgnore ? "kIgnore" : "kPropagate");
    CurrentScaling rule;
    rule.power_of_2_scales = kType == DType::kFloat16;
    rule.nan = nan;
    float scale_cpu = 0.0f, scale_inv_cpu = 0.0f, amax_cpu = -1.0f;
    quantize_fp8_current_(view, q_cpu.data(), kFormat, rule, &scale_cpu, &scale_inv_cpu, &amax_cpu);
    std::uint32_t bits = 0;
    for (int t = 0; t < 1000; ++t) {
      bits = max_bits(bits, amax_share<kType>(data, n, t, 1000, nan == NanAmax::kIgnore));
    }
    const float amax_cuda = from_bits32(canonical_amax_bits(bits));
    const float scale_cuda = current_scale(amax_cuda, fp8_max(kFormat), rule);
    for (int t = 0; t < 1000; ++t) {
      quantize_share<kType, kFormat, false>(data, q_cuda.data(), n, scale_cuda, t, 1000);
    }
    EXPECT_EQ(bits32(amax_cuda), bits32(amax_cpu));
    EXPECT_EQ(bits32(scale_cuda), bits32(scale_cpu));
    EXPECT_EQ(bits32(1.0f / scale_cuda), bits32(scale_inv_cpu));
    ASSERT_EQ(q_cuda, q_cpu);
  }
  // Dequantize every code (and the codes above) into the dtype.
  for (int c = 0; c < 256; ++c) q_cpu[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(c);
  for (float scale_inv : {1.0f / 3.0f, 1.0f / 448.0f, 2.5e4f}) {
    std::vector<Storage> out_cpu(static_cast<std::size_t>(n)), out_cuda(out_cpu.size());
    dequantize_fp8_(q_cpu.data(), kFormat, &scale_inv, {out_cpu.data(), n, kType});
    for (int t = 0; t < 1000; ++t) {
      dequantize_share<kType, kFormat>(q_cpu.data(), scale_inv, out_cuda.data(), n, t, 1000);
    }
    ASSERT_EQ(std::memcmp(out_cuda.data(), out_cpu.data(), out_cpu.size() * sizeof(Storage)), 0)
        << "scale_inv " << scale_inv;
  }
  // MXFP8 (the specials make some blocks inf or NaN).
  const std::int64_t blocks = n / cols * ((cols + 31) / 32);
  std::vector<std::uint8_t> s_cpu(static_cast<std::size_t>(blocks)), s_cuda(s_cpu.size());
  quantize_mxfp8_(view, cols, q_cpu.data(), s_cpu.data(), kFormat);
  run_mx<kType, kFormat>(x, cols, q_cuda.data(), s_cuda.data());
  ASSERT_EQ(s_cuda, s_cpu);
  ASSERT_EQ(q_cuda, q_cpu);
  std::vector<Storage> out_cpu(static_cast<std::size_t>(n)), out_cuda(out_cpu.size());
  dequantize_mxfp8_(q_cpu.data(), s_cpu.data(), cols, kFormat, {out_cpu.data(), n, kType});
  run_mx_dequantize<kType, kFormat>(q_cpu.data(), s_cpu.data(), cols, out_cuda.data(), n);
  ASSERT_EQ(std::memcmp(out_cuda.data(), out_cpu.data(), out_cpu.size() * sizeof(Storage)), 0);
}

TEST(Fp8ElementTest, EmulatedCudaThreadsGiveTheCpuKernelsBitsNanIncluded) {
  std::mt19937_64 rng(23);
  check_against_cpu<DType::kFloat32, Fp8Format::kE4M3>(rng);
  check_against_cpu<DType::kFloat32, Fp8Format::kE5M2>(rng);
  check_against_cpu<DType::kFloat64, Fp8Format::kE4M3>(rng);
  check_against_cpu<DType::kFloat64, Fp8Format::kE5M2>(rng);
  check_against_cpu<DType::kFloat16, Fp8Format::kE4M3>(rng);
  check_against_cpu<DType::kFloat16, Fp8Format::kE5M2>(rng);
  check_against_cpu<DType::kBFloat16, Fp8Format::kE4M3>(rng);
  check_against_cpu<DType::kBFloat16, Fp8Format::kE5M2>(rng);
}

// ---- On a device -----------------------------------------------------------------------------

constexpr Device kCuda{DeviceType::kCUDA, 0};

// A host tensor and its copy on the device.
struct DeviceCopy {
  Tensor host;
  unsigned char* device;
  explicit DeviceCopy(Tensor t) : host(std::move(t)), device(to_device(host.bytes)) {}
  ~DeviceCopy() { cudaFree(device); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  TensorView cpu() { return {host.data(), host.n, host.dtype}; }
  TensorView cuda() { return {device, host.n, host.dtype, kCuda}; }
};

template <typename T>
std::vector<T> fetch(const T* p, std::size_t n) {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // also reports an asynchronous kernel error
  return to_host(p, n);
}

// Both float vectors equal bit for bit.
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(bits32(got[i]), bits32(want[i]))
        << what << " " << i << ": " << got[i] << " vs " << want[i];
  }
}

template <DType kType, Fp8Format kFormat>
void check_device_per_tensor(std::int64_t n, cudaStream_t stream, std::mt19937_64& rng) {
  using Storage = typename Fp8Io<kType>::Storage;
  SCOPED_TRACE(::testing::Message()
               << dtype_name(kType) << " " << fp8_format_name(kFormat) << " n=" << n);
  DeviceCopy x(random_tensor(kType, n, rng, /*specials=*/n % 2 == 1));
  const auto size = static_cast<std::size_t>(n);
  std::vector<std::uint8_t> q_cpu(size);
  std::uint8_t* q = to_device(std::vector<std::uint8_t>(size, 0xaa));
  // [scale, amax, scale_inv] slots on the device.
  for (float scale : {1.0f, 0.37f, 3.0e5f}) {
    float amax_cpu = 0.5f;
    quantize_fp8_(x.cpu(), q_cpu.data(), kFormat, &scale, &amax_cpu);
    float* slots = to_device(std::vector<float>{scale, 0.5f});
    quantize_fp8_(x.cuda(), q, kFormat, slots, slots + 1, stream);
    const std::vector<float> got = fetch(slots, 2);
    EXPECT_EQ(bits32(got[1]), bits32(amax_cpu)) << "fused amax, scale " << scale;
    ASSERT_EQ(fetch(q, size), q_cpu) << "scale " << scale;
    // amax alone, accumulating into 0 and into a NaN (which stays).
    float amax_only = 0.0f;
    amax_(x.cpu(), &amax_only);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float* amax_slots = to_device(std::vector<float>{0.0f, nan});
    amax_(x.cuda(), amax_slots, stream);
    amax_(x.cuda(), amax_slots + 1, stream);
    const std::vector<float> amaxes = fetch(amax_slots, 2);
    EXPECT_EQ(bits32(amaxes[0]), bits32(amax_only));
    EXPECT_EQ(bits32(amaxes[1]), bits32(nan));
    cudaFree(slots);
    cudaFree(amax_slots);
  }
  // Current scaling: [scale, scale_inv, amax], the amax slot dirty beforehand (it is overwritten).
  CurrentScaling rule;
  rule.power_of_2_scales = kType == DType::kBFloat16;
  std::vector<float> current_cpu(3, 0.0f);
  quantize_fp8_current_(x.cpu(), q_cpu.data(), kFormat, rule, &current_cpu[0], &current_cpu[1],
                        &current_cpu[2]);
  float* current = to_device(std::vector<float>{-1.0f, -1.0f, 1e30f});
  quantize_fp8_current_(x.cuda(), q, kFormat, rule, current, current + 1, current + 2, stream);
  expect_bits(fetch(current, 3), current_cpu, "current scaling [scale, scale_inv, amax]");
  ASSERT_EQ(fetch(q, size), q_cpu);
  // Dequantize what the CPU quantized, with its scale_inv.
  std::vector<unsigned char> out_cpu(size * sizeof(Storage));
  dequantize_fp8_(q_cpu.data(), kFormat, &current_cpu[1], {out_cpu.data(), n, kType});
  unsigned char* out = to_device(std::vector<unsigned char>(out_cpu.size(), 0xaa));
  dequantize_fp8_(q, kFormat, current + 1, {out, n, kType, kCuda}, stream);
  EXPECT_EQ(fetch(out, out_cpu.size()), out_cpu);
  cudaFree(q);
  cudaFree(current);
  cudaFree(out);
}

TEST(CudaFp8Test, PerTensorKernelsGiveTheCpuKernelsBits) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(31);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // 1, a partial block, and more elements than the grid's 1024 x 256 threads: the loops wrap.
  for (std::int64_t n : {1, 77, (1 << 19) + 333}) {
    cudaStream_t s = n == 77 ? nullptr : stream;  // the default stream too
    check_device_per_tensor<DType::kFloat32, Fp8Format::kE4M3>(n, s, rng);
    check_device_per_tensor<DType::kFloat32, Fp8Format::kE5M2>(n, s, rng);
    check_device_per_tensor<DType::kFloat64, Fp8Format::kE4M3>(n, s, rng);
    check_device_per_tensor<DType::kFloat16, Fp8Format::kE4M3>(n, s, rng);
    check_device_per_tensor<DType::kFloat16, Fp8Format::kE5M2>(n, s, rng);
    check_device_per_tensor<DType::kBFloat16, Fp8Format::kE4M3>(n, s, rng);
    check_device_per_tensor<DType::kBFloat16, Fp8Format::kE5M2>(n, s, rng);
  }
  cudaStreamDestroy(stream);
}

// An empty tensor: current scaling still writes amax 0 and its scale; the others do nothing.
TEST(CudaFp8Test, EmptyTensorsLaunchNothingButCurrentScalingStillWritesItsScale) {
  SKIP_WITHOUT_DEVICE();
  float* slots = to_device(std::vector<float>{7.0f, 7.0f, 7.0f, 7.0f});
  const TensorView empty{nullptr, 0, DType::kFloat32, kCuda};
  amax_(empty, slots + 3);
  quantize_fp8_(empty, nullptr, Fp8Format::kE4M3, slots, slots + 3);
  dequantize_fp8_(nullptr, Fp8Format::kE4M3, slots, empty);
  const CurrentScaling rule;
  quantize_fp8_current_(empty, nullptr, Fp8Format::kE4M3, rule, slots, slots + 1, slots + 2);
  const float scale = current_scale(0.0f, 448.0f, rule);
  expect_bits(fetch(slots, 4), {scale, 1.0f / scale, 0.0f, 7.0f}, "[scale, scale_inv, amax, -]");
  cudaFree(slots);
}

template <DType kType, Fp8Format kFormat>
void check_device_mx(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) {
  using Storage = typename Fp8Io<kType>::Storage;
  SCOPED_TRACE(::testing::Message() << dtype_name(kType) << " " << fp8_format_name(kFormat) << " "
                                    << rows << "x" << cols);
  const std::int64_t n = rows * cols, blocks = rows * ((cols + 31) / 32);
  DeviceCopy x(random_tensor(kType, n, rng, /*specials=*/true));
  const auto size = static_cast<std::size_t>(n), nb = static_cast<std::size_t>(blocks);
  std::vector<std::uint8_t> q_cpu(size), s_cpu(nb);
  quantize_mxfp8_(x.cpu(), cols, q_cpu.data(), s_cpu.data(), kFormat);
  std::uint8_t* q = to_device(std::vector<std::uint8_t>(size, 0xaa));
  std::uint8_t* s = to_device(std::vector<std::uint8_t>(nb, 0xaa));
  quantize_mxfp8_(x.cuda(), cols, q, s, kFormat);
  ASSERT_EQ(fetch(s, nb), s_cpu);
  ASSERT_EQ(fetch(q, size), q_cpu);
  std::vector<unsigned char> out_cpu(size * sizeof(Storage));
  dequantize_mxfp8_(q_cpu.data(), s_cpu.data(), cols, kFormat, {out_cpu.data(), n, kType});
  unsigned char* out = to_device(std::vector<unsigned char>(out_cpu.size(), 0xaa));
  dequantize_mxfp8_(q, s, cols, kFormat, {out, n, kType, kCuda});
  EXPECT_EQ(fetch(out, out_cpu.size()), out_cpu);
  cudaFree(q);
  cudaFree(s);
  cudaFree(out);
}

TEST(CudaFp8Test, MxKernelsGiveTheCpuKernelsBits) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(37);
  // Short last blocks (33, 100), a single element, and more blocks than one grid of warps takes.
  const std::int64_t shapes[][2] = {{1, 1}, {3, 33}, {1000, 100}, {512, 4096}};
  for (const auto& shape : shapes) {
    check_device_mx<DType::kFloat32, Fp8Format::kE4M3>(shape[0], shape[1], rng);
    check_device_mx<DType::kFloat32, Fp8Format::kE5M2>(shape[0], shape[1], rng);
    check_device_mx<DType::kFloat64, Fp8Format::kE4M3>(shape[0], shape[1], rng);
    check_device_mx<DType::kFloat16, Fp8Format::kE4M3>(shape[0], shape[1], rng);
    check_device_mx<DType::kBFloat16, Fp8Format::kE4M3>(shape[0], shape[1], rng);
  }
}

// The DelayedTensors of `count` tensors whose histories are interleaved as in fp8::Linear's
// [len, 3] buffers; `history` and `scales` (all scales, then all scale_invs) in host or device
// memory.
std::vector<DelayedTensor> delayed_tensors(float* history, float* scales, std::size_t count,
                                           std::int64_t len) {
  std::vector<DelayedTensor> tensors(count);
  for (std::size_t t = 0; t < count; ++t) {
    tensors[t] = {history + t / 3 * static_cast<std::size_t>(len) * 3 + t % 3, 3, scales + t,
                  scales + count + t, t % 4 == 1 ? Fp8Format::kE5M2 : Fp8Format::kE4M3};
  }
  return tensors;
}

TEST(CudaFp8Test, DelayedUpdateOverSeveralLaunchesGivesTheCpuBits) {
  SKIP_WITHOUT_DEVICE();
  const std::size_t count = 250;  // three launches of 96
  for (AmaxAlgo algo : {AmaxAlgo::kMax, AmaxAlgo::kMostRecent}) {
    DelayedScaling rule;
    rule.history_len = 16;
    rule.algo = algo;
    rule.margin = 2;
    std::vector<float> history(static_cast<std::size_t>(rule.history_len) * 3 * (count / 3 + 1));
    std::mt19937 rng(41);
    const float specials[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), HUGE_VALF, 1e-44f};
    for (float& h : history) h = rng() % 9 == 0 ? specials[rng() % 4] : (rng() % 100000) / 3.0f;
    std::vector<float> scales(2 * count, 1.0f);  // scale, then scale_inv
    float* d_history = to_device(history);
    float* d_scales = to_device(scales);
    const auto cpu = delayed_tensors(history.data(), scales.data(), count, rule.history_len);
    const auto gpu = delayed_tensors(d_history, d_scales, count, rule.history_len);
    for (int iteration = 0; iteration < 3; ++iteration) {
      delayed_scaling_update_(cpu.data(), cpu.size(), rule);
      delayed_scaling_update_(gpu.data(), gpu.size(), rule, kCuda);
    }
    expect_bits(fetch(d_scales, scales.size()), scales, "scale / scale_inv");
    expect_bits(fetch(d_history, history.size()), history, "history");
    cudaFree(d_history);
    cudaFree(d_scales);
  }
}

// Every FP8 launch captured into a CUDA graph on a stream, then replayed: a call that waited for
// the host, or used the legacy default stream, would fail the capture.
TEST(CudaFp8Test, TheKernelsAreCapturedInACudaGraphAndReplayAsRunEagerly) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(43);
  const std::int64_t n = 4096 * 3;
  DeviceCopy x(random_tensor(DType::kFloat16, n, rng, /*specials=*/false));
  const auto size = static_cast<std::size_t>(n);
  std::uint8_t* q = to_device(std::vector<std::uint8_t>(4 * size, 0));
  std::uint8_t* mx_scales = to_device(std::vector<std::uint8_t>(size / 32, 0));
  // [scale, scale_inv, amax, current scale, current scale_inv, current amax, history x 4]
  float* f = to_device(std::vector<float>{2.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 0, 0});
  DelayedScaling rule;
  rule.history_len = 4;
  const DelayedTensor delayed{f + 6, 1, f, f + 1, Fp8Format::kE4M3};
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const auto iteration = [&] {
    quantize_fp8_(x.cuda(), q, Fp8Format::kE4M3, f, f + 6, stream);  // records into history[0]
    amax_(x.cuda(), f + 2, stream);
    quantize_fp8_current_(x.cuda(), q + size, Fp8Format::kE5M2, CurrentScaling{}, f + 3, f + 4,
                          f + 5, stream);
    dequantize_fp8_(q, Fp8Format::kE4M3, f + 1, {x.device, n, DType::kFloat16, kCuda}, stream);
    quantize_mxfp8_(x.cuda(), 4096, q + 2 * size, mx_scales, Fp8Format::kE4M3, stream);
    delayed_scaling_update_(&delayed, 1, rule, kCuda, stream);
  };
  // Eager: two iterations, keeping the results.
  iteration();
  iteration();
  const std::vector<float> eager_f = fetch(f, 10);
  const std::vector<std::uint8_t> eager_q = fetch(q, 3 * size);
  const std::vector<unsigned char> eager_x = fetch(x.device, x.host.bytes.size());
  // Reset, capture one iteration, replay it twice.
  ASSERT_EQ(cudaMemcpy(f, std::vector<float>{2.0f, 0.5f, 0, 0, 0, 0, 0, 0, 0, 0}.data(),
                       10 * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(x.device, x.host.bytes.data(), x.host.bytes.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  iteration();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  expect_bits(fetch(f, 10), eager_f, "slots");
  EXPECT_EQ(fetch(q, 3 * size), eager_q);
  EXPECT_EQ(fetch(x.device, x.host.bytes.size()), eager_x);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(q);
  cudaFree(mx_scales);
  cudaFree(f);
}

}  // namespace
}  // namespace mixprec::core::cuda
