// The handles the bindings pass across the C ABI (include/mixprec/c_api.h): torch::Tensor* and
// the two optimizer conventions, torch::optim::Optimizer* (tch-rs) and
// std::shared_ptr<torch::optim::Optimizer>* (TorchSharp).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c/guard.h"
#include "mixprec/c_api.h"

namespace mixprec::c_api {

/// The tensor behind a binding's torch::Tensor* handle.
inline at::Tensor& tensor_arg(void* handle, const char* call, const char* name) {
  return *static_cast<at::Tensor*>(require(handle, call, name));
}

/// The tensors behind `n` handles (`handles` may be NULL only when n is 0); NULL entries are
/// refused when `allow_null_entries` is false and become undefined tensors otherwise.
std::vector<at::Tensor> tensor_list_arg(void* const* handles, std::size_t n, const char* call,
                                        const char* name, bool allow_null_entries);

/// A new heap torch::Tensor the caller owns (NULL for an undefined tensor).
inline void* new_tensor_handle(at::Tensor t) {
  return t.defined() ? new at::Tensor(std::move(t)) : nullptr;
}

/// The optimizer behind a torch::optim::Optimizer* (tch-rs) handle.
inline torch::optim::Optimizer& optimizer_arg(void* handle, const char* call) {
  return *static_cast<torch::optim::Optimizer*>(require(handle, call, "optimizer"));
}

/// The optimizer behind a std::shared_ptr<torch::optim::Optimizer>* (TorchSharp) handle.
inline torch::optim::Optimizer& shared_optimizer_arg(void* handle, const char* call) {
  auto& shared = *static_cast<std::shared_ptr<torch::optim::Optimizer>*>(
      require(handle, call, "shared_optimizer"));
  if (!shared) {
    throw Failure{MIXPREC_ERROR_NULL_ARGUMENT,
                  std::string(call) + ": shared_optimizer holds no optimizer (an empty shared_ptr)"};
  }
  return *shared;
}

}  // namespace mixprec::c_api
