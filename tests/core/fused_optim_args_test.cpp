// The fused optimizers' argument checks at the dispatch point (src/core/kernels.cpp): each bad
// call throws core::Error naming the parameter and the problem before anything is written or
// launched. The CUDA cases need no device: they are refused before any launch.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "message_of.h"
#include "mixprec/core/error.h"
#include "mixprec/core/optim_kernels.h"

namespace mixprec::core {
namespace {

constexpr Device kGpu{DeviceType::kCUDA, 0};

// The message `f` throws ("" if none).
template <typename F>
std::string error_of(const F& f) {
  return test::message_of(f).value_or("");
}

struct Buffers {
  std::vector<float> p = std::vector<float>(8, 1.0f), g = std::vector<float>(8, 2.0f),
                     m = std::vector<float>(8, 0.0f), v = std::vector<float>(8, 0.0f);
  TensorView view(std::vector<float>& x, Device d = {}) {
    return {x.data(), 8, DType::kFloat32, d};
  }
};

TEST(FusedOptimArgsTest, SgdRefusesBadViewsNamingParameterAndBuffer) {
  Buffers b;
  SgdHyper h;
  h.lr = 0.1;
  h.momentum = 0.9;
  const auto sgd = [&](SgdTensors t) {
    const std::vector<float> before = b.p;
    const std::string msg = error_of([&] { fused_sgd_(&t, 1, h, nullptr, nullptr); });
    EXPECT_EQ(b.p, before) << "a refused call wrote the parameter";
    return msg;
  };
  SgdTensors half{b.view(b.p), b.view(b.g), b.view(b.m)};
  for (TensorView* v : {&half.param, &half.grad, &half.momentum_buffer}) {
    v->dtype = DType::kFloat16;
    v->device = {DeviceType::kCUDA, 0};
  }
  EXPECT_NE(sgd(half).find("parameter 0: param is float16; the fused optimizers support float32 "
                           "and float64 on CUDA (float16 and bfloat16 on the CPU only)"),
            std::string::npos);
  SgdTensors half_grad{b.view(b.p), b.view(b.g), b.view(b.m)};
  half_grad.grad.dtype = DType::kFloat16;
  EXPECT_NE(sgd(half_grad).find("parameter 0: grad is float16 but the parameter is float32"),
            std::string::npos);
  SgdTensors mixed{b.view(b.p), b.view(b.g), b.view(b.m)};
  mixed.grad.dtype = DType::kFloat64;
  EXPECT_NE(sgd(mixed).find("parameter 0: grad is float64 but the parameter is float32"),
            std::string::npos);
  SgdTensors shorter{b.view(b.p), b.view(b.g), b.view(b.m)};
  shorter.momentum_buffer.numel = 7;
  EXPECT_NE(sgd(shorter).find("momentum_buffer has 7 elements but the parameter has 8"),
            std::string::npos);
  SgdTensors null_data{b.view(b.p), {nullptr, 8}, b.view(b.m)};
  EXPECT_NE(sgd(null_data).find("grad has 8 elements but a null data pointer"), std::string::npos);
  SgdTensors elsewhere{b.view(b.p), b.view(b.g), b.view(b.m, kGpu)};
  EXPECT_NE(sgd(elsewhere).find("momentum_buffer is on cuda:0 but the parameter is on cpu"),
            std::string::npos);
  SgdTensors no_count{b.view(b.p, kGpu), b.view(b.g, kGpu), b.view(b.m, kGpu)};
  EXPECT_NE(sgd(no_count).find("CUDA parameters with momentum need a device step_count"),
            std::string::npos);
}

TEST(FusedOptimArgsTest, AllParametersMustShareOneDevice) {
  Buffers a, b;
  std::vector<AdamTensors> t{
      {a.view(a.p), a.view(a.g), a.view(a.m), a.view(a.v), {}, 1},
      {b.view(b.p, kGpu), b.view(b.g, kGpu), b.view(b.m, kGpu), b.view(b.v, kGpu), {}, 1}};
  const std::string msg =
      error_of([&] { fused_adam_(t.data(), t.size(), AdamHyper{}, nullptr, nullptr); });
  EXPECT_NE(msg.find("all parameters must be on one device; parameter 0 is on cpu, "
                     "parameter 1 on cuda:0"),
            std::string::npos)
      << msg;
  EXPECT_EQ(a.p, std::vector<float>(8, 1.0f));
}

TEST(FusedOptimArgsTest, AdamNeedsAStepOnTheCpuAndAStepCountOnCuda) {
  Buffers b;
  AdamTensors cpu{b.view(b.p), b.view(b.g), b.view(b.m), b.view(b.v), {}, 0};
  EXPECT_NE(error_of([&] {
              fused_adam_(&cpu, 1, AdamHyper{}, nullptr, nullptr);
            }).find("parameter 0: step must be >= 1"),
            std::string::npos);
  AdamTensors gpu{b.view(b.p, kGpu), b.view(b.g, kGpu), b.view(b.m, kGpu), b.view(b.v, kGpu), {}};
  EXPECT_NE(error_of([&] {
              fused_adam_(&gpu, 1, AdamHyper{}, nullptr, nullptr);
            }).find("parameter 0: CUDA parameters need a device step_count"),
            std::string::npos);
  AdamHyper amsgrad;
  amsgrad.amsgrad = true;  // max_exp_avg_sq is then required
  AdamTensors no_max{b.view(b.p), b.view(b.g), b.view(b.m), b.view(b.v), {}, 1};
  EXPECT_NE(error_of([&] {
              fused_adam_(&no_max, 1, amsgrad, nullptr, nullptr);
            }).find("max_exp_avg_sq has 0 elements but the parameter has 8"),
            std::string::npos);
  EXPECT_EQ(b.p, std::vector<float>(8, 1.0f));
}

}  // namespace
}  // namespace mixprec::core
