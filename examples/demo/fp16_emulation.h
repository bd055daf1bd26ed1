// fp16 storage emulated on fp32 tensors, for the demo on machines without fp16 compute: a value and
// its gradient are rounded through fp16 at a layer boundary, and the gradient elements that the
// rounding flushes to zero are counted.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace mixprec_demo {

/// Gradient elements seen by round_fp16() in backward: those non-zero in fp32, those of them that
/// fp16 rounding turned into zero (below half of fp16's smallest subnormal, 2^-25) and those it
/// turned into inf (beyond fp16's largest finite value, 65504).
struct FlushCounter {
  std::int64_t nonzero = 0;
  std::int64_t flushed = 0;
  std::int64_t overflowed = 0;

  /// flushed / nonzero, 0 when nothing was seen.
  double flushed_share() const {
    return nonzero == 0 ? 0.0 : static_cast<double>(flushed) / static_cast<double>(nonzero);
  }
};

/// `x` rounded through fp16 (x.to(kHalf).to(kFloat)), autograd-tracked: in backward the incoming
/// gradient is rounded through fp16 the same way, as real fp16 storage of the gradient would do,
/// and counted in `counter` (when not null). `counter` must outlive the backward pass.
torch::Tensor round_fp16(const torch::Tensor& x, FlushCounter* counter);

}  // namespace mixprec_demo
