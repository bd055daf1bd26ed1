// Internal to mixprec's checkpoints (src/torch/checkpoint/): what the module/file half
// (checkpoint.cpp) and the optimizer half (optimizer_dict.cpp) share. Python's state_dicts are
// read as GenericDicts keyed by strings; loads are planned (every check first) and committed after.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <string>

namespace mixprec::detail {

/// What a load runs to change the model or optimizer, once every check has passed.
using Commit = std::function<void()>;

/// The value under `key` in one of Python's string-keyed dicts, or null.
inline const c10::IValue* find(const c10::impl::GenericDict& dict, const std::string& key) {
  const auto it = dict.find(c10::IValue(key));
  return it == dict.end() ? nullptr : &it->value();
}

/// A dict as Python's state_dicts are: string keys, any values.
inline c10::impl::GenericDict new_dict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

/// Checks Python's optimizer `state_dict` against `optimizer` (SGD, Adam or AdamW) and returns
/// what loads it; throws, changing nothing, where it does not fit.
Commit plan_optimizer_load(torch::optim::Optimizer& optimizer,
                           const c10::impl::GenericDict& state_dict);

}  // namespace mixprec::detail
