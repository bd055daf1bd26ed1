// The demo's FP8 runs (LibTorch >= 2.1, which has float8 dtypes): the demo's MLP with
// mixprec::fp8::Linear layers, trained under mixprec::fp8::Autocast with one of the recipes, and
// what its FP8 casts of the gradients flushed to zero. Empty on older LibTorch (main.cpp says so).
#pragma once

#include <mixprec/torch_version.h>

#if MIXPREC_TORCH_FP8

#include <mixprec/fp8.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "fp16_emulation.h"
#include "model.h"

namespace mixprec_demo {

/// The demo's MLP (model.h: the same layers, tanh and output multiplier) with each Linear a
/// mixprec::fp8::Linear. Under an fp8::Autocast scope its forward and backward cast to FP8;
/// outside one it computes in fp32, as fp8::Linear is then torch::nn::Linear.
class Fp8MlpImpl : public torch::nn::Module {
 public:
  /// A copy of `source`: the same shapes and the same weights, so an FP8 run starts where the
  /// other runs start. `amax_history_len`: the delayed recipe's (fp8::LinearOptions). `fp4`: the
  /// 4-bit recipes cast whole blocks of 16 or 32 only, so the first layer (8 features in) and
  /// the last (1 out) compute in fp32, as 4-bit training keeps its first and last layers in
  /// higher precision (TE's NVFP4 recipe too); the hidden layers are cast.
  Fp8MlpImpl(MlpImpl& source, double output_scale, std::int64_t amax_history_len,
             bool fp4 = false);

  /// The prediction (batch x 1, float32). While autograd records, remembers the gradient that
  /// reaches each layer's output (its grad_output) for count_flushed().
  torch::Tensor forward(const torch::Tensor& x);

  /// After backward: casts each layer's grad_output of this step to FP8 as `recipe` does for the
  /// weight gradient (the layer's grad_output scale, E5M2 for kHybrid; MXFP8: E4M3 blocks of 32
  /// along the batch; NVFP4 and MXFP4: E2M1 blocks along the batch, rounded to nearest, without
  /// NVFP4's RHT and stochastic rounding) and adds its elements non-zero in fp32, and those the
  /// cast turned into 0, to `counter` (4-bit: the cast layers only). Returns in `*scale_min`, `*scale_max` the scale linear0's grad_output was
  /// multiplied by (MXFP8: the smallest and largest over its non-zero blocks). A recount:
  /// fp8::Linear keeps its FP8 tensors to itself.
  void count_flushed(const mixprec::fp8::Recipe& recipe, FlushCounter* counter, double* scale_min,
                     double* scale_max);

 private:
  std::vector<mixprec::fp8::Linear> layers_;
  std::vector<torch::Tensor> grad_outputs_;  // filled by the hooks forward() registers
  double output_scale_;
  bool fp4_;
};
TORCH_MODULE(Fp8Mlp);

}  // namespace mixprec_demo

#endif  // MIXPREC_TORCH_FP8
