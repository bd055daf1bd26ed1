// Python's state_dict layouts of the SGD, Adam and AdamW optimizers (include/mixprec/checkpoint.h):
// writing them as torch.optim's state_dict() does and loading them as its load_state_dict() does.
#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/checkpoint.h"
#include "mixprec/torch_version.h"
#include "torch/checkpoint/dicts.h"
#include "torch/optim/adapter.h"

namespace mixprec {
namespace {

using c10::IValue;
using c10::impl::GenericDict;
using c10::impl::GenericList;
using detail::find;
using detail::new_dict;
using torch::optim::AdamOptions;
using torch::optim::AdamParamState;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;
using torch::optim::SGDOptions;
using torch::optim::SGDParamState;

enum class OptimKind { kSGD, kAdam, kAdamW };

OptimKind kind_of(const torch::optim::Optimizer& optimizer, const char* who) {
  TORCH_CHECK(!optimizer.param_groups().empty(), who, ": the optimizer has no param groups");
  auto all = [&](auto* type) {
    using Options = std::remove_pointer_t<decltype(type)>;
    return std::all_of(optimizer.param_groups().begin(), optimizer.param_groups().end(),
                       [](const auto& g) { return dynamic_cast<const Options*>(&g.options()); });
  };
  if (all(static_cast<SGDOptions*>(nullptr))) return OptimKind::kSGD;
  if (all(static_cast<AdamOptions*>(nullptr))) return OptimKind::kAdam;
  if (all(static_cast<AdamWOptions*>(nullptr))) return OptimKind::kAdamW;
  TORCH_CHECK(false, who, ": only SGD, Adam and AdamW (torch::optim's or mixprec::optim's) have ",
              "Python's state_dict layout here");
}

const torch::optim::OptimizerParamState* state_of(const torch::optim::Optimizer& optimizer,
                                                  const at::Tensor& param) {
  const auto& all = optimizer.state();
  const auto it = all.find(optim::detail::state_key(param));
  return it == all.end() ? nullptr : it->second.get();
}

// A step count, read from the device for a CUDA parameter's state
// (Note [Step counts of CUDA parameters]).
template <typename State>
std::int64_t step_of(const State& state) {
  if (const auto* on_gpu = dynamic_cast<const optim::detail::DeviceStepState<State>*>(&state)) {
    return on_gpu->host_count();
  }
  return state.step();
}

// Python's Adam and AdamW param groups; `decoupled` is AdamW's (Python writes the key from
// PyTorch 2.7 on: MIXPREC_TORCH_DECOUPLED_WEIGHT_DECAY).
template <typename Options>
GenericDict adam_group(const Options& o, bool decoupled) {
  GenericDict g = new_dict();
  g.insert("lr", o.lr());
  g.insert("betas", c10::ivalue::Tuple::create({std::get<0>(o.betas()), std::get<1>(o.betas())}));
  g.insert("eps", o.eps());
  g.insert("weight_decay", o.weight_decay());
  g.insert("amsgrad", o.amsgrad());
  g.insert("maximize", false);
  g.insert("foreach", IValue());
  g.insert("capturable", false);
  g.insert("differentiable", false);
  g.insert("fused", IValue());
#if MIXPREC_TORCH_DECOUPLED_WEIGHT_DECAY
  g.insert("decoupled_weight_decay", decoupled);
#else
  (void)decoupled;
#endif
  return g;
}

GenericDict sgd_group(const SGDOptions& o) {
  GenericDict g = new_dict();
  g.insert("lr", o.lr());
  g.insert("momentum", o.momentum());
  g.insert("dampening", o.dampening());
  g.insert("weight_decay", o.weight_decay());
  g.insert("nesterov", o.nesterov());
  g.insert("maximize", false);
  g.insert("foreach", IValue());
  g.insert("differentiable", false);
  g.insert("fused", IValue());
  return g;
}

template <typename State>
GenericDict adam_state(const State& s, bool amsgrad) {
  GenericDict d = new_dict();
  d.insert("step", at::scalar_tensor(static_cast<double>(step_of(s)), at::kFloat));
  d.insert("exp_avg", s.exp_avg().detach());
  d.insert("exp_avg_sq", s.exp_avg_sq().detach());
  if (amsgrad && s.max_exp_avg_sq().defined())
    d.insert("max_exp_avg_sq", s.max_exp_avg_sq().detach());
  return d;
}

// ---- loading Python's optimizer dicts ----------------------------------------------------------

constexpr const char* kLoadOptimizer = "mixprec::load_optimizer_state_dict";

double number(const GenericDict& group, const char* key, double current) {
  const IValue* v = find(group, key);
  if (v == nullptr) return current;
  if (v->isDouble()) return v->toDouble();
  if (v->isInt()) return static_cast<double>(v->toInt());
  if (v->isBool()) return v->toBool() ? 1.0 : 0.0;
  TORCH_CHECK(v->isTensor() && v->toTensor().numel() == 1, kLoadOptimizer, ": param group key \"",
              key, "\" must be a number, got a ", v->tagKind());
  return v->toTensor().item<double>();
}

bool flag(const GenericDict& group, const char* key, bool current) {
  const IValue* v = find(group, key);
  if (v == nullptr) return current;
  TORCH_CHECK(v->isBool(), kLoadOptimizer, ": param group key \"", key, "\" must be a bool, got a ",
              v->tagKind());
  return v->toBool();
}

template <typename Options>
void read_adam_options(const GenericDict& g, Options& o) {
  o.lr(number(g, "lr", o.lr()));
  if (const IValue* betas = find(g, "betas")) {
    std::vector<IValue> b;
    if (betas->isTuple()) b = betas->toTupleRef().elements().vec();
    if (betas->isList()) b = betas->toList().vec();
    TORCH_CHECK(
        b.size() == 2 && (b[0].isDouble() || b[0].isInt()) && (b[1].isDouble() || b[1].isInt()),
        kLoadOptimizer, ": param group key \"betas\" must be a pair of numbers");
    o.betas({b[0].toScalar().toDouble(), b[1].toScalar().toDouble()});
  }
  o.eps(number(g, "eps", o.eps()));
  o.weight_decay(number(g, "weight_decay", o.weight_decay()));
  o.amsgrad(flag(g, "amsgrad", o.amsgrad()));
}

// PyTorch >= 2.7 says in each Adam/AdamW group whether its weight decay is decoupled (AdamW's,
// or Adam(decoupled_weight_decay=True)) or L2 (Adam's). LibTorch's Adam has only L2 and its AdamW
// only decoupled decay: a group of the other kind with weight_decay != 0 would resume with other
// math, so it is refused. Without the key (PyTorch < 2.7), or with weight_decay 0, nothing differs.
void check_weight_decay_kind(const GenericDict& group, bool into_adamw, std::size_t index) {
  const IValue* v = find(group, "decoupled_weight_decay");
  if (v == nullptr || v->isNone() || number(group, "weight_decay", 0.0) == 0.0) return;
  const bool decoupled = flag(group, "decoupled_weight_decay", false);
  TORCH_CHECK(decoupled == into_adamw, kLoadOptimizer, ": param group ", index,
              decoupled ? " has decoupled_weight_decay=True (AdamW's weight decay, as "
                          "Adam(decoupled_weight_decay=True) or AdamW saves it), which "
                          "torch::optim::Adam does not have: load it into torch::optim::AdamW "
                          "or mixprec::optim::AdamW"
                        : " has decoupled_weight_decay=False (Adam's L2 weight decay), which "
                          "torch::optim::AdamW does not have: load it into torch::optim::Adam "
                          "or mixprec::optim::Adam");
}

void read_sgd_options(const GenericDict& g, SGDOptions& o) {
  o.lr(number(g, "lr", o.lr()));
  o.momentum(number(g, "momentum", o.momentum()));
  o.dampening(number(g, "dampening", o.dampening()));
  o.weight_decay(number(g, "weight_decay", o.weight_decay()));
  o.nesterov(flag(g, "nesterov", o.nesterov()));
}

// The storages the state tensors of one load use, so that no two of them share one.
using Storages = std::set<const void*>;

// A state tensor as the parameter holds it (Python's load casts it to the parameter's dtype and
// device too). No copy where dtype and device already match, unless the loaded tensor overlaps
// itself (an expanded stride) or shares its storage with another state tensor of this load: an
// optimizer's in-place updates must not reach another tensor's elements.
at::Tensor state_tensor(const GenericDict& state, const char* key, const at::Tensor& param,
                        std::int64_t index, Storages& taken) {
  const IValue* v = find(state, key);
  TORCH_CHECK(v != nullptr && v->isTensor(), kLoadOptimizer, ": the state of parameter ", index,
              " has no tensor \"", key, "\"");
  const at::Tensor& t = v->toTensor();
  TORCH_CHECK(t.sizes() == param.sizes(), kLoadOptimizer, ": \"", key, "\" of parameter ", index,
              " has shape ", t.sizes(), " but the parameter has ", param.sizes());
  at::Tensor out = t.to(param.device(), param.scalar_type());
  const void* storage = out.storage().data();
  if (!out.is_non_overlapping_and_dense() ||
      (out.numel() > 0 && !taken.insert(storage).second)) {
    out = out.clone(at::MemoryFormat::Contiguous);
    taken.insert(out.storage().data());
  }
  return out.detach();
}

std::int64_t step_value(const GenericDict& state, std::int64_t index) {
  const IValue* v = find(state, "step");
  TORCH_CHECK(v != nullptr, kLoadOptimizer, ": the state of parameter ", index, " has no \"step\"");
  double step = 0;
  if (v->isTensor() && v->toTensor().numel() == 1) {
    step = v->toTensor().item<double>();
  } else {
    TORCH_CHECK(v->isInt() || v->isDouble(), kLoadOptimizer, ": \"step\" of parameter ", index,
                " must be a number or a 1-element tensor");
    step = v->toScalar().toDouble();
  }
  // Checked below 2^63 before the conversion, which is undefined behaviour beyond int64's range
  // (libFuzzer found a step of 2.6e24 under UBSan).
  TORCH_CHECK(step >= 0 && step < 0x1p63 && step == std::floor(step), kLoadOptimizer,
              ": \"step\" of parameter ", index, " must be a whole number >= 0 and < 2^63, got ",
              step);
  return static_cast<std::int64_t>(step);
}

template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> read_adam_state(const GenericDict& s,
                                                                   const at::Tensor& param,
                                                                   bool amsgrad,
                                                                   std::int64_t index,
                                                                   Storages& taken) {
  auto state = std::make_unique<State>();
  state->step(step_value(s, index));
  state->exp_avg(state_tensor(s, "exp_avg", param, index, taken));
  state->exp_avg_sq(state_tensor(s, "exp_avg_sq", param, index, taken));
  if (amsgrad) state->max_exp_avg_sq(state_tensor(s, "max_exp_avg_sq", param, index, taken));
  return state;
}

}  // namespace

detail::Commit detail::plan_optimizer_load(torch::optim::Optimizer& optimizer,
                                           const GenericDict& state_dict) {
  const OptimKind kind = kind_of(optimizer, kLoadOptimizer);
  const IValue* groups_value = find(state_dict, "param_groups");
  const IValue* state_value = find(state_dict, "state");
  TORCH_CHECK(groups_value != nullptr && groups_value->isList() && state_value != nullptr &&
                  state_value->isGenericDict(),
              kLoadOptimizer, ": expected an optimizer state_dict, a dict with \"state\" (a dict) ",
              "and \"param_groups\" (a list)");
  const GenericList groups = groups_value->toList();
  const GenericDict all_state = state_value->toGenericDict();
  auto& live = optimizer.param_groups();
  // PyTorch's checks and words (torch/optim/optimizer.py).
  TORCH_CHECK(groups.size() == live.size(),
              "loaded state dict has a different number of parameter groups");

  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  Storages taken;
  std::vector<std::pair<at::Tensor, std::unique_ptr<torch::optim::OptimizerParamState>>> states;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const IValue group_value = groups.get(i);
    TORCH_CHECK(group_value.isGenericDict(), kLoadOptimizer, ": param group ", i, " is not a dict");
    const GenericDict group = group_value.toGenericDict();
    const IValue* params = find(group, "params");
    TORCH_CHECK(params != nullptr && params->isList(), kLoadOptimizer, ": param group ", i,
                " has no \"params\" list");
    const GenericList indices = params->toList();
    TORCH_CHECK(indices.size() == live[i].params().size(),
                "loaded state dict contains a parameter group that doesn't match the size of "
                "optimizer's group");
    TORCH_CHECK(!flag(group, "maximize", false), kLoadOptimizer, ": param group ", i,
                " has maximize=True, which LibTorch's optimizers do not have");
    if (kind != OptimKind::kSGD) check_weight_decay_kind(group, kind == OptimKind::kAdamW, i);
    options.push_back(live[i].options().clone());
    bool amsgrad = false;
    if (kind == OptimKind::kSGD) {
      read_sgd_options(group, static_cast<SGDOptions&>(*options.back()));
    } else if (kind == OptimKind::kAdam) {
      read_adam_options(group, static_cast<AdamOptions&>(*options.back()));
      amsgrad = static_cast<AdamOptions&>(*options.back()).amsgrad();
    } else {
      read_adam_options(group, static_cast<AdamWOptions&>(*options.back()));
      amsgrad = static_cast<AdamWOptions&>(*options.back()).amsgrad();
    }
    for (std::size_t j = 0; j < indices.size(); ++j) {
      const at::Tensor& param = live[i].params()[j];
      TORCH_CHECK(indices.get(j).isInt(), kLoadOptimizer, ": param group ", i,
                  " lists a parameter index that is not an int");
      const std::int64_t index = indices.get(j).toInt();
      const auto found = all_state.find(IValue(index));
      std::unique_ptr<torch::optim::OptimizerParamState> state;
      if (found != all_state.end()) {
        TORCH_CHECK(found->value().isGenericDict(), kLoadOptimizer, ": the state of parameter ",
                    index, " is not a dict");
        const GenericDict s = found->value().toGenericDict();
        if (kind == OptimKind::kSGD) {
          const IValue* buffer = find(s, "momentum_buffer");
          if (buffer != nullptr && !buffer->isNone()) {
            auto sgd = std::make_unique<SGDParamState>();
            sgd->momentum_buffer(state_tensor(s, "momentum_buffer", param, index, taken));
            state = std::move(sgd);
          }
        } else if (kind == OptimKind::kAdam) {
          state = read_adam_state<AdamParamState>(s, param, amsgrad, index, taken);
        } else {
          state = read_adam_state<AdamWParamState>(s, param, amsgrad, index, taken);
        }
      }
      states.emplace_back(param, std::move(state));
    }
  }
  auto shared = std::make_shared<decltype(states)>(std::move(states));
  auto shared_options = std::make_shared<decltype(options)>(std::move(options));
  return [&optimizer, shared, shared_options] {
    auto& groups = optimizer.param_groups();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      groups[i].set_options(std::move((*shared_options)[i]));
    }
    auto& all = optimizer.state();
    for (auto& [param, state] : *shared) {
      const auto key = optim::detail::state_key(param);
      if (state) {
        all[key] = std::move(state);
      } else {
        all.erase(key);  // Python's load replaces the whole state
      }
    }
  };
}

c10::impl::GenericDict optimizer_state_dict(const torch::optim::Optimizer& optimizer) {
  const OptimKind kind = kind_of(optimizer, "mixprec::optimizer_state_dict");
  GenericDict state(c10::IntType::get(), c10::AnyType::get());
  GenericList groups(c10::AnyType::get());
  std::int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    const auto& options = group.options();
    GenericDict g = kind == OptimKind::kSGD ? sgd_group(static_cast<const SGDOptions&>(options))
                    : kind == OptimKind::kAdam
                        ? adam_group(static_cast<const AdamOptions&>(options), /*decoupled=*/false)
                        : adam_group(static_cast<const AdamWOptions&>(options), /*decoupled=*/true);
    const bool amsgrad =
        kind == OptimKind::kAdam
            ? static_cast<const AdamOptions&>(options).amsgrad()
            : kind == OptimKind::kAdamW && static_cast<const AdamWOptions&>(options).amsgrad();
    GenericList indices(c10::AnyType::get());  // a List[int] would pickle as build_intlist
    for (const at::Tensor& param : group.params()) {
      if (const auto* s = state_of(optimizer, param)) {
        if (kind == OptimKind::kSGD) {
          const auto& sgd = static_cast<const SGDParamState&>(*s);
          GenericDict d = new_dict();
          d.insert("momentum_buffer", sgd.momentum_buffer().detach());
          state.insert(index, d);
        } else if (kind == OptimKind::kAdam) {
          state.insert(index, adam_state(static_cast<const AdamParamState&>(*s), amsgrad));
        } else {
          state.insert(index, adam_state(static_cast<const AdamWParamState&>(*s), amsgrad));
        }
      }
      indices.push_back(IValue(index++));
    }
    g.insert("params", indices);
    groups.push_back(g);
  }
  GenericDict dict = new_dict();
  dict.insert("state", state);
  dict.insert("param_groups", groups);
  return dict;
}

void load_optimizer_state_dict(torch::optim::Optimizer& optimizer,
                               const c10::impl::GenericDict& state_dict) {
  detail::plan_optimizer_load(optimizer, state_dict)();
}

}  // namespace mixprec
