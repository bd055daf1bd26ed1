// round_fp16(): the fp16 emulation of the demo, as a custom autograd function that rounds values
// in forward and gradients in backward, counting the gradient elements fp16 flushes to zero.
#include "fp16_emulation.h"

namespace mixprec_demo {
namespace {

torch::Tensor through_half(const torch::Tensor& x) {
  // Round-to-nearest-even, with fp16's subnormals, flush below 2^-25 and overflow to inf.
  return x.to(torch::kHalf).to(torch::kFloat);
}

struct RoundFp16 : torch::autograd::Function<RoundFp16> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               std::int64_t counter_address) {
    ctx->saved_data["counter"] = counter_address;
    return through_half(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor& g = grads[0];
    torch::Tensor rounded = through_half(g);
    auto* counter = reinterpret_cast<FlushCounter*>(ctx->saved_data["counter"].toInt());
    if (counter != nullptr) {
      const torch::Tensor nonzero = g != 0;
      counter->nonzero += nonzero.sum().item<std::int64_t>();
      counter->flushed += (nonzero & (rounded == 0)).sum().item<std::int64_t>();
      counter->overflowed +=
          (torch::isinf(rounded) & torch::isfinite(g)).sum().item<std::int64_t>();
    }
    return {rounded, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor round_fp16(const torch::Tensor& x, FlushCounter* counter) {
  return RoundFp16::apply(x, static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(counter)));
}

}  // namespace mixprec_demo
