// The SIMD spans of the CPU fused optimizers (src/cpu/fused_optim_simd.cpp, one copy per Highway
// target, the best one picked at run time). Internal: called from src/cpu/fused_optim.cpp, which
// cuts the parameters into spans and runs them on threads. No Highway types show through.
#pragma once

#include <cstdint>

#include "core/element_ops.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::cpu {

/// `n` elements of one parameter, from the same offset in each array; S is the storage type
/// (float, double, or the bits of fp16/bf16). `buffer` is unused without momentum.
template <typename S>
struct SgdSpan {
  S* param;
  S* grad;
  S* buffer;
  std::int64_t n;
};

/// Likewise for Adam(W); `max_exp_avg_sq` is unused without amsgrad.
template <typename S>
struct AdamSpan {
  S* param;
  S* grad;
  S* exp_avg;
  S* exp_avg_sq;
  S* max_exp_avg_sq;
  std::int64_t n;
};

/// One SGD span with the element op `k` (its `first` flag: the buffer holds no history yet);
/// `momentum`: whether there is a momentum buffer. fp16/bf16 (`dtype`) compute in float.
void sgd_span(const SgdSpan<float>& s, const SgdOp<float, true>& k, bool momentum);
void sgd_span(const SgdSpan<double>& s, const SgdOp<double, true>& k, bool momentum);
void sgd_span(const SgdSpan<std::uint16_t>& s, DType dtype, const SgdOp<float, true>& k,
              bool momentum);

/// One Adam(W) span with the element op `k`; `amsgrad`: keep the running maximum.
void adam_span(const AdamSpan<float>& s, const AdamOp<float, false>& k, bool amsgrad);
void adam_span(const AdamSpan<double>& s, const AdamOp<double, false>& k, bool amsgrad);
void adam_span(const AdamSpan<std::uint16_t>& s, DType dtype, const AdamOp<float, false>& k,
               bool amsgrad);

}  // namespace mixprec::core::cpu
