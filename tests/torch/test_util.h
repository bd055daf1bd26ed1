// Small helpers shared by the LibTorch tests.
#pragma once

#include <gtest/gtest.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <type_traits>

#include "message_of.h"  // EXPECT_THROW_WITH
#include "torch/optim/adapter.h"
#include "torch/without_backtrace.h"

/// The state `optimizer` keeps for `param`, or nullptr. LibTorch files it under the address of the
/// parameter's TensorImpl: printed to a string in LibTorch 1.13, the pointer itself in 2.x.
/// `Optimizer` is torch::optim::Optimizer, const or not (the state's constness follows it).
template <typename Optimizer>
auto* find_state(Optimizer& optimizer, const torch::Tensor& param) {
  using State = std::conditional_t<std::is_const_v<Optimizer>,
                                   const torch::optim::OptimizerParamState,
                                   torch::optim::OptimizerParamState>;
  const auto it = optimizer.state().find(mixprec::optim::detail::state_key(param));
  return it == optimizer.state().end() ? static_cast<State*>(nullptr) : it->second.get();
}
