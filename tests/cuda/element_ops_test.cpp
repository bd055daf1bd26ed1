// The CUDA kernels' element operations and chunk loop (src/core/element_ops.h, multi_tensor.cuh)
// run on the host, every emulated thread of every chunk in turn: unscale-and-check against the
// scalar reference of tests/core, the fused optimizers against the CPU fused kernels, bit for bit,
// for aligned and unaligned buffers, chunk tails, the first momentum step and every option. This
// needs no GPU; on a GPU, tests/cuda/cuda_*_test.cpp check the kernels themselves.
#include "core/element_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/reference.h"
#include "cuda/multi_tensor.cuh"
#include "mixprec/core/optim_kernels.h"

namespace mixprec::core::cuda {
namespace {

// kDepth buffers of n elements, each starting `offset` elements past a 64-byte boundary.
template <typename T>
struct Buffers {
  std::vector<std::vector<T>> storage;
  std::vector<T*> ptr;
  std::int64_t n;

  Buffers(int depth, std::int64_t count, std::int64_t offset, std::mt19937& rng) : n(count) {
    std::normal_distribution<double> normal;
    for (int d = 0; d < depth; ++d) {
      storage.emplace_back(static_cast<std::size_t>(n + offset) + 64 / sizeof(T));
      auto addr = reinterpret_cast<std::uintptr_t>(storage.back().data());
      T* p = storage.back().data() + (64 - addr % 64) % 64 / sizeof(T) + offset;
      for (std::int64_t i = 0; i < n; ++i) {
        const double x = normal(rng);
        p[i] = static_cast<T>(d == 1 ? 1024.0 * x : d >= 3 ? 0.01 * x * x : x);  // grad; moments
      }
      ptr.push_back(p);
    }
  }
  TensorView view(int d) { return {ptr[d], n, sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64}; }
  std::vector<T> values(int d) const { return std::vector<T>(ptr[d], ptr[d] + n); }
  // A copy with the same values (and the same offset from alignment).
  Buffers copy(std::int64_t offset) const {
    std::mt19937 unused;
    Buffers c(static_cast<int>(ptr.size()), n, offset, unused);
    for (std::size_t d = 0; d < ptr.size(); ++d) std::copy(ptr[d], ptr[d] + n, c.ptr[d]);
    return c;
  }
};

// What a kernel does with `op` on one tensor: every chunk (or only the one at `chunk_begin`),
// every one of `threads` threads. Buffer 1 (the gradient) is written only when `write_grad`.
template <int kDepth, typename T, typename Op>
void run_like_kernel(std::vector<T*>& buffers, std::int64_t n, Op& op, bool write_grad, int threads,
                     std::int64_t chunk_begin = -1) {
  T* ptr[kDepth];
  bool write[kDepth];
  for (int d = 0; d < kDepth; ++d) {
    ptr[d] = buffers[static_cast<std::size_t>(d)];
    write[d] = kDepth == 1 ? write_grad : d != 1 || write_grad;
  }
  for (std::int64_t begin = 0; begin < n; begin += kChunk) {
    if (chunk_begin >= 0 && begin != chunk_begin) continue;
    const std::int64_t end = std::min(begin + kChunk, n);
    for (int t = 0; t < threads; ++t) chunk_loop<kDepth>(ptr, write, begin, end, op, t, threads);
  }
}

template <typename T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

const std::int64_t kSizes[] = {1, 5, 4099, kChunk + 3, 2 * kChunk + 1};

template <typename T, bool kMomentum>
void check_sgd(const SgdHyper& hyper, const float* grad_scale) {
  std::mt19937 rng(7);
  for (std::int64_t n : kSizes) {
    for (std::int64_t offset : {0, 1}) {
      Buffers<T> cpu(3, n, offset, rng);
      Buffers<T> gpu = cpu.copy(offset);
      std::int64_t count = 0;
      for (int step = 0; step < 3; ++step) {
        SgdTensors t{cpu.view(0), cpu.view(1), cpu.view(2), step == 0};
        ASSERT_TRUE(fused_sgd_(&t, 1, hyper, grad_scale, nullptr));
        const auto op = make_sgd_op<T, kMomentum>(hyper, inverse_scale(grad_scale), &count);
        run_like_kernel<SgdOp<T, kMomentum>::kDepth>(gpu.ptr, n, op, op.unscale, 7);
        ++count;  // what advance_kernel does after an applied step
      }
      for (int d = 0; d < (kMomentum ? 3 : 2); ++d) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << offset << " buffer " << d);
        expect_same_bits(gpu.values(d), cpu.values(d), "sgd");
      }
    }
  }
}

TEST(ElementOpsTest, SgdElementMathAndChunkLoopMatchTheCpuKernelBitForBit) {
  const float scale = 1024.0f;
  SgdHyper plain;
  plain.lr = 0.1;
  plain.weight_decay = 0.01;
  SgdHyper damped = plain;
  damped.momentum = 0.9;
  damped.dampening = 0.25;
  SgdHyper nesterov = plain;
  nesterov.momentum = 0.8;
  nesterov.nesterov = true;
  check_sgd<float, false>(plain, &scale);
  check_sgd<double, false>(plain, nullptr);  // no grad_scale: the grad is not written
  check_sgd<float, true>(damped, &scale);
  check_sgd<double, true>(damped, &scale);
  check_sgd<float, true>(nesterov, nullptr);
}

template <typename T, bool kAmsgrad>
void check_adam(const AdamHyper& hyper, const float* grad_scale) {
  std::mt19937 rng(11);
  for (std::int64_t n : kSizes) {
    for (std::int64_t offset : {0, 3}) {
      Buffers<T> cpu(5, n, offset, rng);
      Buffers<T> gpu = cpu.copy(offset);
      for (std::int64_t step = 1; step <= 3; ++step) {
        AdamTensors t{cpu.view(0), cpu.view(1), cpu.view(2), cpu.view(3), cpu.view(4), step};
        ASSERT_TRUE(fused_adam_(&t, 1, hyper, grad_scale, nullptr));
        const auto op = make_adam_op<T, kAmsgrad>(hyper, inverse_scale(grad_scale), step);
        run_like_kernel<AdamOp<T, kAmsgrad>::kDepth>(gpu.ptr, n, op, op.unscale, 5);
      }
      for (int d = 0; d < (kAmsgrad ? 5 : 4); ++d) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << offset << " buffer " << d);
        expect_same_bits(gpu.values(d), cpu.values(d), "adam");
      }
    }
  }
}

TEST(ElementOpsTest, AdamElementMathAndChunkLoopMatchTheCpuKernelBitForBit) {
  const float scale = 65536.0f;
  AdamHyper adam;
  adam.lr = 0.01;
  adam.weight_decay = 0.1;
  AdamHyper adamw = adam;
  adamw.decoupled_weight_decay = true;
  AdamHyper amsgrad = adamw;
  amsgrad.amsgrad = true;
  check_adam<float, false>(adam, &scale);
  check_adam<double, false>(adam, nullptr);
  check_adam<float, false>(adamw, &scale);
  check_adam<float, true>(amsgrad, &scale);
  check_adam<double, true>(amsgrad, &scale);
}

// Random bit patterns of a dtype, specials (inf, NaN, denormals, extremes) among them.
std::uint64_t random_bits(DType dtype, std::mt19937_64& rng) {
  const std::uint64_t r = rng();
  if (r % 16 == 0) {  // a special value: an all-ones or all-zeros exponent, any mantissa
    switch (dtype) {
      case DType::kFloat32:
        return (r & 0x807fffffu) | (r & 1 ? 0x7f800000u : 0u);
      case DType::kFloat64:
        return (r & 0x800fffffffffffffull) | (r & 1 ? 0x7ff0000000000000ull : 0ull);
      case DType::kFloat16:
        return (r & 0x83ffu) | (r & 1 ? 0x7c00u : 0u);
      case DType::kBFloat16:
        return (r & 0x807fu) | (r & 1 ? 0x7f80u : 0u);
    }
  }
  return dtype == DType::kFloat64 ? r : dtype == DType::kFloat32 ? r & 0xffffffffu : r & 0xffffu;
}

template <DType kType>
void check_unscale(float inv) {
  using Storage = typename UnscaleType<kType>::Storage;
  std::mt19937_64 rng(static_cast<std::uint64_t>(kType) + 1);
  for (std::int64_t n : kSizes) {
    for (std::int64_t offset : {0, 1}) {
      std::vector<Storage> storage(static_cast<std::size_t>(n + offset) + 64);
      const auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
      Storage* data = storage.data() + (64 - addr % 64) % 64 / sizeof(Storage) + offset;
      std::vector<std::uint64_t> before(static_cast<std::size_t>(n));
      bool any_nonfinite = false;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint64_t bits = random_bits(kType, rng);
        std::memcpy(&data[i], &bits, sizeof(Storage));  // little-endian: the low bytes
        before[static_cast<std::size_t>(i)] = bits;
        any_nonfinite = any_nonfinite || testing::reference_nonfinite(kType, bits);
      }
      bool found = false;
      std::vector<Storage*> ptr{data};
      for (std::int64_t begin = 0; begin < n; begin += kChunk) {  // per block, as the kernel
        UnscaleOp<kType> op = make_unscale_op<kType>(inv);
        run_like_kernel<1>(ptr, n, op, op.write, 5, begin);
        found = found || op.found;
      }
      EXPECT_EQ(found, any_nonfinite) << "n=" << n;
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint64_t got = 0;
        std::memcpy(&got, &data[i], sizeof(Storage));
        const std::uint64_t want =
            testing::reference_unscaled(kType, before[static_cast<std::size_t>(i)], inv);
        if (testing::reference_isnan(kType, want)) {
          ASSERT_TRUE(testing::reference_isnan(kType, got)) << "element " << i;
        } else {
          ASSERT_EQ(got, want) << dtype_name(kType) << " n=" << n << " offset=" << offset
                               << " element " << i << " input bits " << before[i];
        }
      }
    }
  }
}

TEST(ElementOpsTest, UnscaleElementOpAndChunkLoopMatchTheReference) {
  for (float inv : {1.0f / 65536.0f, 0.3f, 1.0f}) {  // 1: nothing may be written
    check_unscale<DType::kFloat32>(inv);
    check_unscale<DType::kFloat64>(inv);
    check_unscale<DType::kFloat16>(inv);
    check_unscale<DType::kBFloat16>(inv);
  }
}

TEST(ElementOpsTest, SkipAndInverseScaleReadTheDeviceScalarsAsTheCpuPath) {
  const float zero = 0.0f, one = 1.0f, two = 2.0f, nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(skip_step(nullptr));
  EXPECT_FALSE(skip_step(&zero));
  EXPECT_TRUE(skip_step(&one));
  EXPECT_TRUE(skip_step(&two));  // any non-zero value: Note [found_inf is 0 or 1]
  EXPECT_TRUE(skip_step(&nan));
  const float third = 3.0f;
  EXPECT_EQ(inverse_scale(nullptr), 1.0f);
  EXPECT_EQ(inverse_scale(&third), static_cast<float>(1.0 / 3.0));  // via double, as unscale_
}

}  // namespace
}  // namespace mixprec::core::cuda
