// mixprec::fp8 on a real GPU (label gpu; LibTorch >= 2.1, which has float8 dtypes):
//  (a) the CUDA kernels give the CPU kernels' bits: amax, quantize with and without the fused amax,
//      dequantize, MXFP8, for float32/64/16 and bfloat16 inputs with inf, NaN (both signs),
//      subnormals and -0 among them, contiguous and transposed;
//  (b) they equal PyTorch's own chain on CUDA (x.to(float) * scale, clamp, .to(float8)), where a
//      NaN counts as NaN whatever its bits (CUDA's arithmetic drops a NaN's sign and payload);
//  (c) delayed scaling on CUDA (Recipe::update's batched kernel after fp8::Linear forwards) leaves
//      the amax histories and scales bit-identical to the same run on the CPU;
//  (d) none of it synchronises with the host (SyncDebugMode::L_ERROR);
//  (e) fp8::Linear's forward equals at::_scaled_mm on the same FP8 tensors and scales, computed
//      here from PyTorch ops (sm_89+ and LibTorch >= 2.5, which has at::_scaled_mm's one-tensor
//      form; skipped with a message on an older GPU);
//  (f) a timing print: amax and quantize in GB/s next to a device copy (no pass/fail threshold).
// Every test is skipped (GTEST_SKIP), never failed, without a CUDA device.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "mixprec/torch_version.h"

#if MIXPREC_TORCH_FP8
#include <mixprec/fp8.h>

#include "mixprec/core/fp8.h"
#include "torch/fp8_reference.h"  // PyTorch-op references of tests/torch (fp8_ref::)

namespace mixprec_gpu_test {
namespace {

namespace fp8 = mixprec::fp8;

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

const torch::Device kCuda(torch::kCUDA, 0);
const at::ScalarType kFp8Types[] = {at::kFloat8_e4m3fn, at::kFloat8_e5m2};
const at::ScalarType kInputTypes[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

// A float32 CPU tensor [rows, cols] of normal values spread over many magnitudes, with specials
// at fixed places when asked: +-inf, NaN of both signs, a subnormal float, -0, 1e30 (inf in fp16).
Tensor values(std::int64_t rows, std::int64_t cols, bool specials) {
  Tensor t = torch::randn({rows, cols}) * torch::pow(2.0, torch::randint(-12, 12, {rows, cols}));
  if (specials) {
    float* p = t.data_ptr<float>();
    const std::uint32_t bits[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                                  0x00000123u, 0x80000000u, 0x7149f2cau};
    for (std::size_t k = 0; k < 7; ++k) {
      std::memcpy(&p[(k * 7919) % static_cast<std::size_t>(t.numel())], &bits[k], 4);
    }
  }
  return t;
}

Tensor cuda_scalar(float v) {
  return torch::full({}, v, torch::dtype(torch::kFloat).device(kCuda));
}

// ---------------------------------------------------------------------------------------------
// (a) CUDA against the CPU kernels, and (b) against PyTorch's chain on CUDA

TEST(GpuFp8, KernelsOnCudaGiveTheCpuKernelsBitsAndPyTorchsChain) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(5);
  for (at::ScalarType in : kInputTypes) {
    // 300 x 333: rows with a short last MX block, and more elements than one grid of the kernels.
    const Tensor base = values(300, 333, /*specials=*/true).to(in);
    for (const Tensor& x_cpu : {base, base.t()}) {
      const Tensor x = x_cpu.to(kCuda);
      SCOPED_TRACE(::testing::Message() << in << (x_cpu.is_contiguous() ? "" : " transposed"));
      // amax: the CPU's bits (NaN here), and torch.max's NaN.
      EXPECT_TRUE(fp8_ref::bitwise_equal(fp8::amax(x).cpu(), fp8::amax(x_cpu)));
      EXPECT_TRUE(std::isnan(fp8::amax(x).item<float>()));
      for (at::ScalarType f : kFp8Types) {
        SCOPED_TRACE(::testing::Message() << f);
        for (float s : {1.0f, 0.37f, 3.0e5f}) {
          const Tensor q = fp8::quantize(x, cuda_scalar(s), f);
          EXPECT_TRUE(fp8_ref::bitwise_equal(q.cpu(), fp8::quantize(x_cpu, fp8_ref::scalar(s), f)))
              << "scale " << s;
          EXPECT_TRUE(fp8_ref::bitwise_equal(q, fp8_ref::quantize(x, cuda_scalar(s), f),
                                             /*nan_any_bits=*/true))
              << "scale " << s;
          // The fused amax accumulates into the slot: max(0.5, NaN) is NaN on both.
          const Tensor slot = cuda_scalar(0.5f), slot_cpu = fp8_ref::scalar(0.5f);
          const Tensor q2 = fp8::quantize_and_record_amax(x, cuda_scalar(s), f, slot);
          fp8::quantize_and_record_amax(x_cpu, fp8_ref::scalar(s), f, slot_cpu);
          EXPECT_TRUE(fp8_ref::bitwise_equal(q2, q));
          EXPECT_TRUE(fp8_ref::bitwise_equal(slot.cpu(), slot_cpu));
        }
        // Dequantize every code (and the quantized values) into every dtype.
        const Tensor codes = torch::arange(256, torch::kInt).to(torch::kByte).view(f);
        for (const Tensor& q_cpu : {codes, fp8::quantize(x_cpu, fp8_ref::scalar(0.37f), f)}) {
          for (float si : {1.0f / 3.0f, 2.5e4f}) {
            const Tensor out = fp8::dequantize(q_cpu.to(kCuda), cuda_scalar(si), in);
            EXPECT_TRUE(
                fp8_ref::bitwise_equal(out.cpu(), fp8::dequantize(q_cpu, fp8_ref::scalar(si), in)));
            EXPECT_TRUE(fp8_ref::bitwise_equal(
                out, fp8_ref::dequantize(q_cpu.to(kCuda), cuda_scalar(si), in), true));
          }
        }
        // MXFP8: blocks holding inf or NaN included (all 0x7f, dequantized to NaN on both).
        const fp8::MxTensor mx = fp8::quantize_mxfp8(x, f);
        const fp8::MxTensor mx_cpu = fp8::quantize_mxfp8(x_cpu, f);
        EXPECT_TRUE(fp8_ref::bitwise_equal(mx.scales.cpu(), mx_cpu.scales));
        EXPECT_TRUE(fp8_ref::bitwise_equal(mx.data.cpu(), mx_cpu.data));
        EXPECT_TRUE(fp8_ref::bitwise_equal(fp8::dequantize_mxfp8(mx, in).cpu(),
                                           fp8::dequantize_mxfp8(mx_cpu, in)));
        // Tiles: rowwise, TE's 1x128 and 128x128 (ragged here), both NaN policies.
        for (const auto& [th, tc] :
             {std::pair<std::int64_t, std::int64_t>{1, x.size(-1)}, {1, 128}, {128, 128}, {3, 7}}) {
          for (const fp8::NanAmax nan : {fp8::NanAmax::kIgnore, fp8::NanAmax::kPropagate}) {
            const fp8::TiledTensor t = fp8::quantize_tiled(x, th, tc, f, true, 0.0, nan);
            const fp8::TiledTensor t_cpu = fp8::quantize_tiled(x_cpu, th, tc, f, true, 0.0, nan);
            EXPECT_TRUE(fp8_ref::bitwise_equal(t.scale_inv.cpu(), t_cpu.scale_inv));
            EXPECT_TRUE(fp8_ref::bitwise_equal(t.data.cpu(), t_cpu.data));
            EXPECT_TRUE(fp8_ref::bitwise_equal(fp8::dequantize_tiled(t, in).cpu(),
                                               fp8::dequantize_tiled(t_cpu, in)));
          }
        }
      }
    }
    // MXFP8 against PyTorch ops (tests/torch's reference, on the CPU), finite values only.
    const Tensor finite = values(64, 100, /*specials=*/false).to(in);
    for (at::ScalarType f : kFp8Types) {
      const fp8::MxTensor mx = fp8::quantize_mxfp8(finite.to(kCuda), f);
      const fp8_ref::Mx ref = fp8_ref::quantize_mx(finite, f);
      EXPECT_TRUE(fp8_ref::bitwise_equal(mx.scales.cpu(), ref.scales)) << in << " " << f;
      EXPECT_TRUE(fp8_ref::bitwise_equal(mx.data.cpu(), ref.data)) << in << " " << f;
      EXPECT_TRUE(fp8_ref::bitwise_equal(fp8::dequantize_mxfp8(mx, in).cpu(),
                                         fp8_ref::dequantize_mx(ref, in)))
          << in << " " << f;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// (c) delayed scaling: Recipe::update on CUDA against the same run on the CPU

// Five forwards (no grad: the GEMMs differ by device, the casts must not) under a delayed recipe
// with a short history, on a copy of `proto` on `device`; returns [amax_history, scale, scale_inv].
std::vector<Tensor> delayed_run(const fp8::Linear& proto, torch::Device device,
                                fp8::AmaxAlgo algo) {
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(4).margin(1).amax_compute_algo(algo));
  auto lin = std::dynamic_pointer_cast<fp8::LinearImpl>(proto->clone(device));
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  for (int it = 0; it < 5; ++it) {
    Tensor x = torch::randn({16, 48}) * (it == 2 ? 1000.0 : 1.0);  // a spike in the window
    if (it == 3) x.index_put_({0, 0}, std::numeric_limits<float>::quiet_NaN());
    fp8::Autocast autocast(recipe);  // updates from the previous iteration's amaxes
    lin->forward(x.to(device));
  }
  { fp8::Autocast last(recipe); }  // the last iteration's update
  return {lin->amax_history.cpu(), lin->scale.cpu(), lin->scale_inv.cpu()};
}

TEST(GpuFp8, DelayedRecipeOnCudaKeepsTheCpuHistoriesAndScales) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(3);
  const fp8::Linear proto(fp8::LinearOptions(48, 32).amax_history_len(4));
  for (fp8::AmaxAlgo algo : {fp8::AmaxAlgo::kMax, fp8::AmaxAlgo::kMostRecent}) {
    const std::vector<Tensor> cuda = delayed_run(proto, kCuda, algo);
    const std::vector<Tensor> cpu = delayed_run(proto, torch::kCPU, algo);
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_TRUE(fp8_ref::bitwise_equal(cuda[i], cpu[i])) << "buffer " << i;
    }
    // The run did move the scales (the test is not comparing untouched buffers).
    EXPECT_FALSE(cpu[1].eq(1.0f).all().item<bool>());
  }
}

// ---------------------------------------------------------------------------------------------
// (d) no host synchronisation

TEST(GpuFp8, OpsAndADelayedLinearStepMakeNoHostSync) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(4);
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(8));
  fp8::Linear lin(fp8::LinearOptions(64, 32).amax_history_len(8));
  lin->to(kCuda);
  const Tensor x = torch::randn({32, 64}, torch::device(kCuda)).to(torch::kBFloat16);
  const Tensor t = torch::ones({}, torch::device(kCuda));
  SyncDebugModeGuard guard(c10::cuda::SyncDebugMode::L_ERROR);
  EXPECT_THROW(t.item<float>(), c10::Error);  // positive control: the mode is on
  try {
    const Tensor a = fp8::amax(x);
    const Tensor q = fp8::quantize_and_record_amax(x, t, at::kFloat8_e4m3fn, a);
    fp8::dequantize(q, t, at::kFloat);
    fp8::dequantize_mxfp8(fp8::quantize_mxfp8(x), at::kBFloat16);
    for (int it = 0; it < 3; ++it) {  // forward, backward, and the recipe's update
      Tensor y;
      {
        fp8::Autocast autocast(recipe);
        y = lin->forward(x);
      }
      y.to(at::kFloat).square().sum().backward();
    }
  } catch (const c10::Error& e) {
    ADD_FAILURE() << "an FP8 op synchronised with the host: " << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// (e) fp8::Linear's forward against at::_scaled_mm

#if MIXPREC_TORCH_AT_LEAST(2, 5)
bool has_scaled_mm() {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(0);
  return p->major * 10 + p->minor >= 89;
}

// y = at::_scaled_mm(chain(x, sx), chain(w, sw)^T, 1 / sx, 1 / sw) + bias, from PyTorch ops.
Tensor scaled_mm_reference(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& sx,
                           const Tensor& sw, const Tensor& sx_inv, const Tensor& sw_inv) {
  const Tensor qx = fp8_ref::quantize(x, sx, at::kFloat8_e4m3fn);
  const Tensor qw = fp8_ref::quantize(w, sw, at::kFloat8_e4m3fn);
  Tensor y =
      at::_scaled_mm(qx, qw.t(), sx_inv, sw_inv, std::nullopt, std::nullopt, x.scalar_type());
  return y.add_(bias.to(x.scalar_type()));
}

TEST(GpuFp8, LinearForwardEqualsScaledMmOnTheSameFp8TensorsAndScales) {
  SKIP_WITHOUT_CUDA();
  if (!has_scaled_mm()) {
    GTEST_SKIP() << "at::_scaled_mm needs compute capability 8.9 or newer (Ada, Hopper)";
  }
  torch::manual_seed(6);
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    fp8::Linear lin(fp8::LinearOptions(128, 64).amax_history_len(4));
    lin->to(kCuda);
    const Tensor x = torch::randn({32, 128}, torch::device(kCuda)).to(dtype);
    torch::NoGradGuard no_grad;
    // Current scaling: the scales are 448 / amax of x and of the weight, in float32.
    fp8::Recipe current(fp8::RecipeOptions().scaling(fp8::Scaling::kCurrent));
    Tensor y;
    {
      fp8::Autocast autocast(current);
      y = lin->forward(x);
    }
    const Tensor sx = cuda_scalar(448.0f).div(x.to(at::kFloat).abs().max());
    const Tensor sw = cuda_scalar(448.0f).div(lin->weight.abs().max());
    EXPECT_TRUE(fp8_ref::bitwise_equal(lin->scale.narrow(0, 0, 2), torch::stack({sx, sw})));
    EXPECT_TRUE(fp8_ref::bitwise_equal(lin->scale_inv.narrow(0, 0, 2),
                                       torch::stack({sx.reciprocal(), sw.reciprocal()})));
    const Tensor ref =
        scaled_mm_reference(x, lin->weight, lin->bias, sx, sw, sx.reciprocal(), sw.reciprocal());
    EXPECT_TRUE(fp8_ref::bitwise_equal(y, ref))
        << "max |diff| " << (y.to(at::kFloat) - ref.to(at::kFloat)).abs().max();
    // Delayed scaling, second iteration: the scales of the first one's amaxes.
    fp8::Recipe delayed(fp8::RecipeOptions().amax_history_len(4));
    {
      fp8::Autocast first(delayed);
      lin->forward(x * 3);
    }
    fp8::Autocast second(delayed);
    const Tensor scale = lin->scale.clone(), scale_inv = lin->scale_inv.clone();
    EXPECT_FALSE(scale.eq(1.0f).all().item<bool>());
    const Tensor y2 = lin->forward(x);
    const Tensor ref2 = scaled_mm_reference(x, lin->weight, lin->bias, scale[0], scale[1],
                                            scale_inv[0], scale_inv[1]);
    EXPECT_TRUE(fp8_ref::bitwise_equal(y2, ref2))
        << "max |diff| " << (y2.to(at::kFloat) - ref2.to(at::kFloat)).abs().max();
  }
}
#endif  // MIXPREC_TORCH_AT_LEAST(2, 5)

// ---------------------------------------------------------------------------------------------
// (f) timing print

// Milliseconds per call of f on the current stream (CUDA events, after a warm-up).
template <typename F>
double ms_per_call(const F& f, int calls) {
  f();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int i = 0; i < calls; ++i) f();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / calls;
}

TEST(GpuFp8, PrintsAmaxAndQuantizeBandwidthNextToADeviceCopy) {
  SKIP_WITHOUT_CUDA();
  const std::int64_t n = std::int64_t{1} << 26;  // 64M bf16: 128 MiB in, 64 MiB of fp8 out
  const Tensor x = torch::randn({n}, torch::device(kCuda)).to(torch::kBFloat16);
  Tensor copy = torch::empty_like(x);
  const Tensor scale = cuda_scalar(0.5f), slot = cuda_scalar(0.0f);
  Tensor cur_scale = cuda_scalar(1.0f), cur_inv = cuda_scalar(1.0f), cur_amax = cuda_scalar(0.0f);
  Tensor q = torch::empty({n}, torch::dtype(torch::kByte).device(kCuda));
  const double in = 2.0 * n, out = 1.0 * n;  // bytes of x, bytes of q
  const mixprec::core::TensorView view{
      x.data_ptr(), n, mixprec::core::DType::kBFloat16, {mixprec::core::DeviceType::kCUDA, 0}};
  void* stream = c10::cuda::getCurrentCUDAStream().stream();
  struct Row {
    const char* what;
    double bytes, ms;
  };
  const int calls = 20;
  const Row rows[] = {
      {"device copy (x -> copy)", 2 * in, ms_per_call([&] { copy.copy_(x); }, calls)},
      {"mixprec amax_", in, ms_per_call([&] { fp8::amax(x); }, calls)},
      {"mixprec quantize + fused amax (delayed)", in + out,
       ms_per_call([&] { fp8::quantize_and_record_amax(x, scale, at::kFloat8_e4m3fn, slot); },
                   calls)},
      {"mixprec quantize_fp8_current_ (2 reads)", 2 * in + out,
       ms_per_call(
           [&] {
             mixprec::core::quantize_fp8_current_(
                 view, q.data_ptr<std::uint8_t>(), mixprec::core::Fp8Format::kE4M3, {},
                 cur_scale.data_ptr<float>(), cur_inv.data_ptr<float>(), cur_amax.data_ptr<float>(),
                 stream);
           },
           calls)},
      {"mixprec quantize_mxfp8", in + out + out / 32,
       ms_per_call([&] { fp8::quantize_mxfp8(x); }, calls)},
      {"PyTorch x.abs().max()", in, ms_per_call([&] { x.abs().max(); }, calls)},
      {"PyTorch chain (float, mul, clamp, to e4m3)", in + out,
       ms_per_call([&] { fp8_ref::quantize(x, scale, at::kFloat8_e4m3fn); }, calls)},
  };
  std::printf("FP8 casts of %lld bf16 elements on %s (GB/s = bytes read + written / time):\n",
              static_cast<long long>(n), at::cuda::getDeviceProperties(0)->name);
  for (const Row& r : rows) {
    EXPECT_GT(r.ms, 0.0) << r.what;
    std::printf("  %-45s %8.3f ms  %7.0f GB/s  (%3.0f%% of the copy's)\n", r.what, r.ms,
                r.bytes / (r.ms * 1e6), 100.0 * (r.bytes / r.ms) / (rows[0].bytes / rows[0].ms));
  }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace mixprec_gpu_test

#endif  // MIXPREC_TORCH_FP8
