// The demo's tanh MLP and its three forward modes (fp32, emulated fp16, native/autocast).
#include "model.h"

#include <string>

namespace mixprec_demo {

MlpImpl::MlpImpl(std::int64_t features, std::int64_t hidden, double output_scale)
    : output_scale_(output_scale) {
  std::int64_t in = features;
  for (int i = 0; i <= kHiddenLayers; ++i) {
    const std::int64_t out = i == kHiddenLayers ? 1 : hidden;
    layers_.push_back(register_module("linear" + std::to_string(i), torch::nn::Linear(in, out)));
    in = out;
  }
  // The output layer starts at zero, so the model starts by predicting 0 instead of a random
  // function much larger than small targets (a common init, e.g. for residual branches).
  torch::NoGradGuard no_grad;
  layers_.back()->weight.zero_();
  layers_.back()->bias.zero_();
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, Precision precision, FlushCounter* counter) {
  if (precision != Precision::kFp16Emulated) {
    torch::Tensor h = x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      h = layers_[i]->forward(h);
      if (i + 1 < layers_.size()) h = torch::tanh(h);
    }
    return (h * output_scale_).to(torch::kFloat);
  }
  // As autocast does for a Linear: fp16 copies of input, weight and bias, an fp16 result
  // (accumulated in fp32, as fp16 matmul kernels do); tanh then reads and writes fp16.
  const auto r = [counter](const torch::Tensor& t) { return round_fp16(t, counter); };
  torch::Tensor h = r(x);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const torch::nn::Linear& l = layers_[i];
    h = r(torch::nn::functional::linear(h, r(l->weight), r(l->bias)));
    if (i + 1 < layers_.size()) h = r(torch::tanh(h));
  }
  return r(h * output_scale_);  // the loss reads it in fp32, as autocast runs mse_loss in fp32
}

}  // namespace mixprec_demo
