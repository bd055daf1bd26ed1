// The CUDA FP4 kernels on a device, through the dispatch point (core::*_ on CUDA views), against
// mixprec's CPU kernels (core::*_ on CPU views) bit for bit, NaNs included: NVFP4 1D and 2D,
// nearest and stochastic, with the amax the device computed (read there: no host synchronisation)
// and with other amaxes; dequantize into every dtype; MXFP4 FLOOR and RCEIL; the RHT; tensors with
// more blocks than one grid has threads (the loops wrap); and a CUDA graph capture of them all.
// Without a CUDA device the CudaFp4Test tests are skipped (GTEST_SKIP), never failed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/fp4_test_util.h"
#include "mixprec/core/fp4.h"
#include "mixprec/core/fp8.h"

namespace mixprec::core {
namespace {

using fp4_test::first_difference;
using fp4_test::kDtypes;
using fp4_test::make_input;
using fp4_test::Typed;
using mixprec::testing::to_device;
using mixprec::testing::to_host;

constexpr Device kCuda{DeviceType::kCUDA, 0};

// A device buffer of n bytes, filled with `fill`.
struct DeviceBytes {
  unsigned char* p = nullptr;
  std::size_t n = 0;
  explicit DeviceBytes(std::size_t bytes, unsigned char fill = 0xaa)
      : p(to_device(std::vector<unsigned char>(bytes, fill))), n(bytes) {}
  explicit DeviceBytes(const std::vector<unsigned char>& host)
      : p(to_device(host)), n(host.size()) {}
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  std::uint8_t* u8() { return p; }
  float* f32() { return reinterpret_cast<float*>(p); }
  /// Its bytes, after the device finished (which also reports an asynchronous kernel error).
  std::vector<unsigned char> fetch() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return to_host(p, n);
  }
};

std::vector<unsigned char> float_bytes(float v) {
  std::vector<unsigned char> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}

// NVFP4 of one tensor on the device and on the CPU: the amax (kIgnore, as TE), quantize with it
// (and with `other_amax` when not null), dequantize into every dtype.
void check_nvfp4(Typed& x, std::int64_t cols, const Nvfp4Options& options, cudaStream_t stream,
                 const float* other_amax = nullptr) {
  const auto n = static_cast<std::size_t>(x.n);
  DeviceBytes d_x(x.bytes);
  const TensorView cuda_x{d_x.p, x.n, x.dtype, kCuda};
  float amax = 0.0f;
  amax_(x.view(), &amax, nullptr, NanAmax::kIgnore);
  DeviceBytes d_amax(float_bytes(0.0f));
  amax_(cuda_x, d_amax.f32(), stream, NanAmax::kIgnore);
  ASSERT_EQ(first_difference(d_amax.fetch(), float_bytes(amax)), -1) << "amax " << amax;
  if (other_amax != nullptr) {
    amax = *other_amax;
    ASSERT_EQ(cudaMemcpy(d_amax.p, &amax, 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<std::uint8_t> q(n / 2), s(n / 16);
  quantize_nvfp4_(x.view(), cols, &amax, q.data(), s.data(), options);
  DeviceBytes d_q(n / 2), d_s(n / 16);
  quantize_nvfp4_(cuda_x, cols, d_amax.f32(), d_q.u8(), d_s.u8(), options, stream);
  ASSERT_EQ(first_difference(d_s.fetch(), fp4_test::as_bytes(s)), -1) << "scales";
  ASSERT_EQ(first_difference(d_q.fetch(), fp4_test::as_bytes(q)), -1) << "codes";
  for (DType out : kDtypes) {
    Typed cpu(out, x.n);
    dequantize_nvfp4_(q.data(), s.data(), &amax, cols, cpu.view());
    DeviceBytes d_out(cpu.bytes.size());
    dequantize_nvfp4_(d_q.u8(), d_s.u8(), d_amax.f32(), cols, {d_out.p, x.n, out, kCuda}, stream);
    ASSERT_EQ(first_difference(d_out.fetch(), cpu.bytes), -1) << "into " << dtype_name(out);
  }
}

TEST(CudaFp4Test, Nvfp4KernelsGiveTheCpuBits) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(201);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // One tile; a few; more blocks (270336) than the grid's 1024 x 256 threads.
  const std::int64_t shapes[][2] = {{16, 16}, {48, 160}, {2048, 2112}};
  for (const auto& shape : shapes) {
    for (DType dtype : kDtypes) {
      for (bool inf : {false, true}) {
        Typed x = make_input(dtype, shape[0] * shape[1], 16, inf, rng);
        for (int variant = 0; variant < 4; ++variant) {
          Nvfp4Options options;
          options.two_d = variant % 2 == 1;
          options.stochastic = variant >= 2;
          options.seed = 0x9e3779b97f4a7c15ull;
          options.offset = 12345;
          SCOPED_TRACE(::testing::Message()
                       << dtype_name(dtype) << " " << shape[0] << "x" << shape[1] << " inf=" << inf
                       << " 2d=" << options.two_d << " sr=" << options.stochastic);
          check_nvfp4(x, shape[1], options, variant == 0 ? nullptr : stream);
          if (::testing::Test::HasFatalFailure()) break;
        }
      }
    }
  }
  cudaStreamDestroy(stream);
}

// Other amaxes than the tensor's: too small (blocks saturate), 0, inf, NaN, near FLT_MAX.
TEST(CudaFp4Test, Nvfp4KernelsGiveTheCpuBitsForAnyAmax) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(203);
  Typed x = make_input(DType::kBFloat16, 64 * 256, 16, true, rng);
  for (float amax : {1.5f, 0.0f, HUGE_VALF, std::numeric_limits<float>::quiet_NaN(), 3e38f}) {
    for (bool two_d : {false, true}) {
      Nvfp4Options options;
      options.two_d = two_d;
      SCOPED_TRACE(::testing::Message() << "amax " << amax << " two_d " << two_d);
      check_nvfp4(x, 256, options, nullptr, &amax);
    }
  }
}

TEST(CudaFp4Test, MxKernelsGiveTheCpuBits) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(207);
  // More blocks (270336) than the grid's 1024 x 256 threads in the last shape.
  const std::int64_t shapes[][2] = {{1, 32}, {7, 160}, {2048, 4224}};
  for (const auto& shape : shapes) {
    for (DType dtype : kDtypes) {
      Typed x = make_input(dtype, shape[0] * shape[1], 32, true, rng);
      const auto n = static_cast<std::size_t>(x.n);
      DeviceBytes d_x(x.bytes);
      for (MxScaleMode mode : {MxScaleMode::kFloor, MxScaleMode::kRceil}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << shape[0] << "x" << shape[1]
                                          << " mode " << static_cast<int>(mode));
        std::vector<std::uint8_t> q(n / 2), s(n / 32);
        quantize_mxfp4_(x.view(), shape[1], q.data(), s.data(), mode);
        DeviceBytes d_q(n / 2), d_s(n / 32);
        quantize_mxfp4_({d_x.p, x.n, dtype, kCuda}, shape[1], d_q.u8(), d_s.u8(), mode);
        ASSERT_EQ(first_difference(d_s.fetch(), fp4_test::as_bytes(s)), -1) << "scales";
        ASSERT_EQ(first_difference(d_q.fetch(), fp4_test::as_bytes(q)), -1) << "codes";
        for (DType out : kDtypes) {
          Typed cpu(out, x.n);
          dequantize_mxfp4_(q.data(), s.data(), shape[1], cpu.view());
          DeviceBytes d_out(cpu.bytes.size());
          dequantize_mxfp4_(d_q.u8(), d_s.u8(), shape[1], {d_out.p, x.n, out, kCuda});
          ASSERT_EQ(first_difference(d_out.fetch(), cpu.bytes), -1) << "into " << dtype_name(out);
        }
      }
    }
  }
}

TEST(CudaFp4Test, HadamardGivesTheCpuBits) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(211);
  for (std::int64_t n : {16, 16 * 1000, 16 * 300000}) {
    for (DType dtype : kDtypes) {
      Typed x = make_input(dtype, n, 16, true, rng);
      std::vector<std::uint16_t> cpu(static_cast<std::size_t>(n));
      hadamard16_(x.view(), cpu.data());
      DeviceBytes d_x(x.bytes), d_out(cpu.size() * 2);
      hadamard16_({d_x.p, n, dtype, kCuda}, reinterpret_cast<std::uint16_t*>(d_out.p));
      ASSERT_EQ(first_difference(d_out.fetch(), fp4_test::as_bytes(cpu)), -1)
          << dtype_name(dtype) << " n=" << n;
    }
  }
}

// Every FP4 launch, with the amax kernel before it, captured into a CUDA graph on a stream, then
// replayed: a call that waited for the host (to read *amax, say) would fail the capture.
TEST(CudaFp4Test, TheKernelsAreCapturedInACudaGraphAndReplayAsRunEagerly) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(213);
  const std::int64_t rows = 64, cols = 256, n = rows * cols;
  Typed x = make_input(DType::kFloat32, n, 16, false, rng);
  DeviceBytes d_x(x.bytes), d_amax(4, 0), d_q(4 * n, 0), d_s(2 * n / 16 + n / 32, 0);
  DeviceBytes d_out(static_cast<std::size_t>(n) * 2 + static_cast<std::size_t>(n) * 4, 0);
  const TensorView cuda_x{d_x.p, n, DType::kFloat32, kCuda};
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const auto iteration = [&] {
    ASSERT_EQ(cudaMemsetAsync(d_amax.p, 0, 4, stream), cudaSuccess);
    amax_(cuda_x, d_amax.f32(), stream, NanAmax::kIgnore);
    Nvfp4Options options;
    quantize_nvfp4_(cuda_x, cols, d_amax.f32(), d_q.u8(), d_s.u8(), options, stream);
    options.two_d = true;
    options.stochastic = true;
    quantize_nvfp4_(cuda_x, cols, d_amax.f32(), d_q.u8() + n / 2, d_s.u8() + n / 16, options,
                    stream);
    dequantize_nvfp4_(d_q.u8(), d_s.u8(), d_amax.f32(), cols, {d_out.p, n, DType::kBFloat16, kCuda},
                      stream);
    quantize_mxfp4_(cuda_x, cols, d_q.u8() + n, d_s.u8() + n / 8, MxScaleMode::kRceil, stream);
    dequantize_mxfp4_(d_q.u8() + n, d_s.u8() + n / 8, cols,
                      {d_out.p + 2 * n, n, DType::kFloat32, kCuda}, stream);
    hadamard16_(cuda_x, reinterpret_cast<std::uint16_t*>(d_q.u8() + 3 * n / 2), stream);
  };
  iteration();
  const std::vector<unsigned char> eager_q = d_q.fetch(), eager_s = d_s.fetch();
  const std::vector<unsigned char> eager_out = d_out.fetch();
  for (DeviceBytes* d : {&d_q, &d_s, &d_out}) {
    ASSERT_EQ(cudaMemset(d->p, 0, d->n), cudaSuccess);
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  iteration();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_EQ(first_difference(d_q.fetch(), eager_q), -1);
  EXPECT_EQ(first_difference(d_s.fetch(), eager_s), -1);
  EXPECT_EQ(first_difference(d_out.fetch(), eager_out), -1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace mixprec::core
