// The CUDA clipping kernels' bodies (src/cuda/clip.cu: NormOp and ClipOp of src/core/element_ops.h
// over multi_tensor.cuh's chunk loop) run on the host, every emulated thread of every chunk, with
// the kernel's block tree and its combine order: against the CPU kernels (the max and the clip bit
// for bit, the sum to rounding), for every dtype, aligned and unaligned buffers and chunk tails;
// and the fused optimizers' clip coefficient in the CUDA element ops against the CPU fused kernels.
// No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/element_ops.h"
#include "core/reference.h"
#include "cuda/multi_tensor.cuh"
#include "mixprec/core/clip_kernels.h"
#include "mixprec/core/optim_kernels.h"

namespace mixprec::core::cuda {
namespace {

// Raw storage of one dtype, starting `offset` elements past a 64-byte boundary.
struct Storage {
  DType dtype;
  std::vector<unsigned char> bytes;
  unsigned char* data;
  std::int64_t n;

  Storage(DType d, std::int64_t count, std::int64_t offset, unsigned seed) : dtype(d), n(count) {
    const std::size_t size = element_size(d);
    bytes.resize(static_cast<std::size_t>(count + offset) * size + 64);
    const auto addr = reinterpret_cast<std::uintptr_t>(bytes.data());
    data = bytes.data() + (64 - addr % 64) % 64 + static_cast<std::size_t>(offset) * size;
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = 300.0 * normal(rng);
      std::uint64_t bits = 0;
      switch (d) {
        case DType::kFloat32: bits = testing::bits32(static_cast<float>(v)); break;
        case DType::kFloat64: bits = testing::bits64(v); break;
        case DType::kFloat16: bits = testing::float_to_half_ref(static_cast<float>(v)); break;
        case DType::kBFloat16: bits = testing::float_to_bf16_ref(static_cast<float>(v)); break;
      }
      std::memcpy(data + static_cast<std::size_t>(i) * size, &bits, size);
    }
  }
  TensorView view() { return {data, n, dtype}; }
  std::vector<unsigned char> contents() const {
    return {data, data + static_cast<std::size_t>(n) * element_size(dtype)};
  }
};

// What norm_kernel computes for one chunk: kThreads NormOps over the chunk loop, then the tree.
template <DType kType, NormKind kKind>
void chunk_norm(void* data, std::int64_t begin, std::int64_t end, float inv, double* value,
                bool* found) {
  using S = typename UnscaleType<kType>::Storage;
  std::vector<double> shared(kThreads);
  *found = false;
  for (int t = 0; t < kThreads; ++t) {
    NormOp<kType, kKind> op = make_norm_op<kType, kKind>(inv);
    S* const ptr[1] = {static_cast<S*>(data)};
    const bool write[1] = {false};
    chunk_loop<1>(ptr, write, begin, end, op, t, kThreads);
    shared[static_cast<std::size_t>(t)] = op.value;
    *found |= op.found;
  }
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    for (int t = 0; t < stride; ++t) {
      const double other = shared[static_cast<std::size_t>(t + stride)];
      double& mine = shared[static_cast<std::size_t>(t)];
      mine = kKind == NormKind::kTwo ? mine + other
                                     : NormOp<DType::kFloat32, kKind>::max_keep_nan(mine, other);
    }
  }
  *value = shared[0];
}

// norm_kernel over every chunk of every view, then combine_kernel's order.
template <NormKind kKind>
double emulated_norm(std::vector<TensorView>& views, float inv, bool* found) {
  const auto add = [](double a, double b) {
    return kKind == NormKind::kTwo ? a + b : NormOp<DType::kFloat32, kKind>::max_keep_nan(a, b);
  };
  double total = 0.0;
  *found = false;
  for (TensorView& v : views) {
    double view_value = 0.0;
    for (std::int64_t begin = 0; begin < v.numel; begin += kChunk) {
      const std::int64_t end = std::min(begin + kChunk, v.numel);
      double value = 0.0;
      bool f = false;
      switch (v.dtype) {
        case DType::kFloat32: chunk_norm<DType::kFloat32, kKind>(v.data, begin, end, inv, &value, &f); break;
        case DType::kFloat64: chunk_norm<DType::kFloat64, kKind>(v.data, begin, end, inv, &value, &f); break;
        case DType::kFloat16: chunk_norm<DType::kFloat16, kKind>(v.data, begin, end, inv, &value, &f); break;
        case DType::kBFloat16: chunk_norm<DType::kBFloat16, kKind>(v.data, begin, end, inv, &value, &f); break;
      }
      view_value = add(view_value, value);
      *found |= f;
    }
    if (v.numel > 0) total = add(total, view_value);
  }
  return total;
}

const DType kAllTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

TEST(CudaClipElementTest, NormKernelBodyMatchesTheCpuKernel) {
  for (DType dtype : kAllTypes) {
    for (float inv : {1.0f, 1.0f / 65536.0f, 1.0f / 1000.0f}) {
      for (std::int64_t offset : {0, 1}) {  // vector loads, and the one-element path
        std::vector<Storage> storage;
        storage.emplace_back(dtype, 3, offset, 1);
        storage.emplace_back(dtype, 2 * kChunk + 37, offset, 2);  // two chunks and a tail
        storage.emplace_back(dtype, 0, offset, 3);
        storage.emplace_back(dtype, 1001, offset, 4);
        std::vector<TensorView> views;
        for (auto& s : storage) views.push_back(s.view());
        bool found = true;
        const double two = emulated_norm<NormKind::kTwo>(views, inv, &found);
        EXPECT_FALSE(found);
        const double inf = emulated_norm<NormKind::kInf>(views, inv, &found);
        double cpu_two = 0.0, cpu_inf = 0.0;
        grad_norm_(views.data(), views.size(), NormKind::kTwo, &inv, &cpu_two, nullptr);
        grad_norm_(views.data(), views.size(), NormKind::kInf, &inv, &cpu_inf, nullptr);
        EXPECT_NEAR(two, cpu_two, 1e-13 * cpu_two) << dtype_name(dtype) << " inv " << inv;
        EXPECT_EQ(testing::bits64(inf), testing::bits64(cpu_inf)) << dtype_name(dtype);
        // A stored inf in the second view's last chunk: found, and the norm is inf.
        const std::uint64_t inf_bits = dtype == DType::kFloat32   ? 0x7f800000u
                                       : dtype == DType::kFloat64 ? 0x7ff0000000000000ull
                                       : dtype == DType::kFloat16 ? 0x7c00u
                                                                  : 0x7f80u;
        std::memcpy(storage[1].data + (2 * kChunk + 5) * element_size(dtype), &inf_bits,
                    element_size(dtype));
        EXPECT_TRUE(std::isinf(emulated_norm<NormKind::kTwo>(views, inv, &found)));
        EXPECT_TRUE(found);
      }
    }
  }
}

TEST(CudaClipElementTest, ClipKernelBodyMatchesTheCpuKernelBitForBit) {
  for (DType dtype : kAllTypes) {
    for (float inv : {1.0f, 1.0f / 1000.0f}) {
      for (float coef : {0.3712f, 1.0f, 0.0f}) {
        for (std::int64_t offset : {0, 3}) {
          Storage gpu(dtype, kChunk + 999, offset, 9), cpu(dtype, kChunk + 999, offset, 9);
          const std::int64_t n = gpu.n;
          switch (dtype) {  // clip_kernel: every chunk, every thread
            case DType::kFloat32: {
              auto op = make_clip_op<DType::kFloat32>(inv, coef);
              float* const ptr[1] = {reinterpret_cast<float*>(gpu.data)};
              const bool write[1] = {true};
              for (std::int64_t b = 0; b < n; b += kChunk) {
                for (int t = 0; t < kThreads; ++t) {
                  chunk_loop<1>(ptr, write, b, std::min(b + kChunk, n), op, t, kThreads);
                }
              }
              break;
            }
            case DType::kFloat64: {
              auto op = make_clip_op<DType::kFloat64>(inv, coef);
              double* const ptr[1] = {reinterpret_cast<double*>(gpu.data)};
              const bool write[1] = {true};
              for (std::int64_t b = 0; b < n; b += kChunk) {
                for (int t = 0; t < kThreads; ++t) {
                  chunk_loop<1>(ptr, write, b, std::min(b + kChunk, n), op, t, kThreads);
                }
              }
              break;
            }
            case DType::kFloat16:
            case DType::kBFloat16: {
              std::uint16_t* const ptr[1] = {reinterpret_cast<std::uint16_t*>(gpu.data)};
              const bool write[1] = {true};
              for (std::int64_t b = 0; b < n; b += kChunk) {
                for (int t = 0; t < kThreads; ++t) {
                  if (dtype == DType::kFloat16) {
                    auto op = make_clip_op<DType::kFloat16>(inv, coef);
                    chunk_loop<1>(ptr, write, b, std::min(b + kChunk, n), op, t, kThreads);
                  } else {
                    auto op = make_clip_op<DType::kBFloat16>(inv, coef);
                    chunk_loop<1>(ptr, write, b, std::min(b + kChunk, n), op, t, kThreads);
                  }
                }
              }
              break;
            }
          }
          TensorView v = cpu.view();
          unscale_and_clip_(&v, 1, &inv, &coef);
          EXPECT_EQ(gpu.contents(), cpu.contents())
              << dtype_name(dtype) << " inv " << inv << " coef " << coef << " offset " << offset;
        }
      }
    }
  }
}

// The fused element ops with a clip coefficient against the CPU fused kernels (fp32 and fp64, the
// CUDA optimizers' dtypes), bit for bit.
TEST(CudaClipElementTest, FusedElementOpsApplyTheCoefficientAsTheCpuKernels) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  const std::int64_t n = 1003;
  std::vector<float> p(n), g(n), m(n), v(n);
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(normal(rng));
    g[i] = static_cast<float>(1000.0 * normal(rng));
    m[i] = static_cast<float>(0.1 * normal(rng));
    v[i] = static_cast<float>(0.01 * normal(rng) * normal(rng));
  }
  const float scale = 1000.0f, found = 0.0f, coef = 0.4375123f;
  AdamHyper h;
  h.lr = 0.01;
  h.weight_decay = 0.1;
  h.decoupled_weight_decay = true;
  // CPU kernel.
  std::vector<float> cp = p, cg = g, cm = m, cv = v;
  AdamTensors t{{cp.data(), n}, {cg.data(), n}, {cm.data(), n}, {cv.data(), n}, {}, 3};
  ASSERT_TRUE(fused_adam_(&t, 1, h, &scale, &found, nullptr, &coef));
  // The CUDA kernel's body, element by element.
  const auto op = make_adam_op<float, false>(h, inverse_scale(&scale), 3, &coef);
  std::vector<float> ep = p, eg = g, em = m, ev = v;
  for (std::int64_t i = 0; i < n; ++i) {
    float e[4] = {ep[i], eg[i], em[i], ev[i]};
    op(e);
    ep[i] = e[0];
    eg[i] = e[1];
    em[i] = e[2];
    ev[i] = e[3];
  }
  EXPECT_EQ(std::memcmp(ep.data(), cp.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(eg.data(), cg.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(em.data(), cm.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(ev.data(), cv.data(), n * 4), 0);
  // SGD with momentum.
  SgdHyper s;
  s.lr = 0.1;
  s.momentum = 0.9;
  std::vector<float> sp = p, sg = g, sb = m;
  SgdTensors st{{sp.data(), n}, {sg.data(), n}, {sb.data(), n}, false};
  ASSERT_TRUE(fused_sgd_(&st, 1, s, &scale, &found, nullptr, &coef));
  const std::int64_t count = 1;  // the buffer has history
  const auto sop = make_sgd_op<float, true>(s, inverse_scale(&scale), &count, &coef);
  std::vector<float> xp = p, xg = g, xb = m;
  for (std::int64_t i = 0; i < n; ++i) {
    float e[3] = {xp[i], xg[i], xb[i]};
    sop(e);
    xp[i] = e[0];
    xg[i] = e[1];
    xb[i] = e[2];
  }
  EXPECT_EQ(std::memcmp(xp.data(), sp.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(xg.data(), sg.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(xb.data(), sb.data(), n * 4), 0);
}

}  // namespace
}  // namespace mixprec::core::cuda
