// The demo's model: a small tanh MLP whose forward pass runs in fp32, in emulated fp16 (values and
// gradients rounded through fp16 at every layer boundary) or as is under real CUDA autocast.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "fp16_emulation.h"

namespace mixprec_demo {

/// How the forward (and so the backward) pass stores activations and gradients.
enum class Precision {
  kFp32,          ///< plain fp32
  kFp16Emulated,  ///< fp32 compute, every layer boundary rounded through fp16 (see round_fp16)
  kNative,        ///< the tensors' own dtypes, e.g. fp16 under mixprec::AutocastGuard on CUDA
};

/// features -> hidden -> ... -> hidden -> 1, with tanh between layers (kHiddenLayers of them),
/// times a fixed `output_scale`: the model predicts in units of its targets, so it trains (with
/// Adam) as a unit-scale problem would, while its gradients are output_scale^2 times smaller.
class MlpImpl : public torch::nn::Module {
 public:
  /// Number of hidden layers: each one more matmul that shrinks the backward gradients.
  static constexpr int kHiddenLayers = 3;

  /// Hidden layers initialized by LibTorch's default (Kaiming-uniform) from the current global
  /// seed; the output layer starts at zero (the model first predicts 0).
  /// `output_scale`: the targets' RMS (Dataset::target_rms).
  MlpImpl(std::int64_t features, std::int64_t hidden, double output_scale);

  /// The prediction (batch x 1, float32 outside autocast). With kFp16Emulated, the inputs,
  /// weights, biases, matmul outputs and activations pass through round_fp16(..., counter),
  /// as fp16 copies of them would in a real fp16 forward pass.
  torch::Tensor forward(const torch::Tensor& x, Precision precision, FlushCounter* counter);

 private:
  std::vector<torch::nn::Linear> layers_;
  double output_scale_;
};
TORCH_MODULE(Mlp);

}  // namespace mixprec_demo
