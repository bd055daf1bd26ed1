// mixprec's checkpoints (include/mixprec/checkpoint.h): Python's state_dict layouts for modules
// and the SGD/Adam/AdamW optimizers, one file for model + optimizer + scaler, and a
// torch::pickle_load that reads Python's OrderedDicts.
#include "mixprec/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/grad_scaler.h"
#include "mixprec/serialize.h"
#include "mixprec/torch_version.h"
#include "torch/optim/adapter.h"
#include "torch/python_pickle.h"

namespace mixprec {
namespace {

using c10::IValue;
using c10::impl::GenericDict;
using c10::impl::GenericList;
using torch::optim::AdamOptions;
using torch::optim::AdamParamState;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;
using torch::optim::SGDOptions;
using torch::optim::SGDParamState;
using Named = std::vector<std::pair<std::string, at::Tensor>>;
using Commit = std::function<void()>;

// Python's order: a module's parameters, its buffers, then each child's, depth first.
void collect(const torch::nn::Module& module, const std::string& prefix, Named& out) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    out.emplace_back(prefix + p.key(), p.value());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    out.emplace_back(prefix + b.key(), b.value());
  }
  for (const auto& child : module.named_children()) {
    collect(*child.value(), prefix + child.key() + ".", out);
  }
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "\"" : ", \"") + name + "\"";
  return out;
}

const IValue* find(const GenericDict& dict, const std::string& key) {
  const auto it = dict.find(IValue(key));
  return it == dict.end() ? nullptr : &it->value();
}

// Checks `state_dict` against `model` and returns what copies it in (PyTorch's strict load).
Commit plan_module_load(torch::nn::Module& model, const GenericDict& state_dict) {
  Named live;
  collect(model, "", live);
  std::vector<std::string> missing, unexpected, errors;
  std::set<std::string> names;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (const auto& [name, tensor] : live) {
    names.insert(name);
    const IValue* value = find(state_dict, name);
    if (value == nullptr) {
      missing.push_back(name);
    } else if (!value->isTensor()) {
      errors.push_back("\"" + name + "\" is a " + value->tagKind() + ", not a tensor.");
    } else if (value->toTensor().sizes() != tensor.sizes()) {
      std::ostringstream message;
      message << "size mismatch for " << name << ": copying a param with shape "
              << value->toTensor().sizes() << " from checkpoint, the shape in current model is "
              << tensor.sizes() << ".";
      errors.push_back(message.str());
    } else {
      copies.emplace_back(tensor, value->toTensor());
    }
  }
  for (const auto& entry : state_dict) {
    const std::string key = entry.key().isString() ? entry.key().toStringRef()
                                                   : "<a " + entry.key().tagKind() + " key>";
    if (names.count(key) == 0) unexpected.push_back(key);
  }
  // PyTorch's order: missing keys, unexpected keys, then the other errors.
  if (!unexpected.empty()) {
    errors.insert(errors.begin(), "Unexpected key(s) in state_dict: " + quoted_list(unexpected) + ".");
  }
  if (!missing.empty()) {
    errors.insert(errors.begin(), "Missing key(s) in state_dict: " + quoted_list(missing) + ".");
  }
  if (!errors.empty()) {
    std::string message = "Error(s) in loading state_dict for " + model.name() + ":";
    for (const std::string& e : errors) message += "\n\t" + e;
    TORCH_CHECK(false, message);
  }
  return [copies = std::move(copies)] {
    c10::NoGradGuard no_grad;
    for (const auto& [to, from] : copies) to.copy_(from);
  };
}

// ---- optimizers ------------------------------------------------------------------------------

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

GenericDict new_dict() {
  return GenericDict(c10::StringType::get(), c10::AnyType::get());
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
  if (amsgrad && s.max_exp_avg_sq().defined()) d.insert("max_exp_avg_sq", s.max_exp_avg_sq().detach());
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
    TORCH_CHECK(b.size() == 2 && (b[0].isDouble() || b[0].isInt()) &&
                    (b[1].isDouble() || b[1].isInt()),
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

// A state tensor as the parameter holds it (Python's load casts it to the parameter's dtype and
// device too).
at::Tensor state_tensor(const GenericDict& state, const char* key, const at::Tensor& param,
                        std::int64_t index) {
  const IValue* v = find(state, key);
  TORCH_CHECK(v != nullptr && v->isTensor(), kLoadOptimizer, ": the state of parameter ", index,
              " has no tensor \"", key, "\"");
  const at::Tensor& t = v->toTensor();
  TORCH_CHECK(t.sizes() == param.sizes(), kLoadOptimizer, ": \"", key, "\" of parameter ", index,
              " has shape ", t.sizes(), " but the parameter has ", param.sizes());
  return t.to(param.device(), param.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
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
  TORCH_CHECK(step >= 0 && step == static_cast<double>(static_cast<std::int64_t>(step)),
              kLoadOptimizer, ": \"step\" of parameter ", index, " must be a whole number >= 0");
  return static_cast<std::int64_t>(step);
}

template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> read_adam_state(const GenericDict& s,
                                                                   const at::Tensor& param,
                                                                   bool amsgrad,
                                                                   std::int64_t index) {
  auto state = std::make_unique<State>();
  state->step(step_value(s, index));
  state->exp_avg(state_tensor(s, "exp_avg", param, index));
  state->exp_avg_sq(state_tensor(s, "exp_avg_sq", param, index));
  if (amsgrad) state->max_exp_avg_sq(state_tensor(s, "max_exp_avg_sq", param, index));
  return state;
}

Commit plan_optimizer_load(torch::optim::Optimizer& optimizer, const GenericDict& state_dict) {
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
            sgd->momentum_buffer(state_tensor(s, "momentum_buffer", param, index));
            state = std::move(sgd);
          }
        } else if (kind == OptimKind::kAdam) {
          state = read_adam_state<AdamParamState>(s, param, amsgrad, index);
        } else {
          state = read_adam_state<AdamWParamState>(s, param, amsgrad, index);
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

// Removes what plain_dicts() filed under kDroppedStateKey (Note [Python's OrderedDicts in
// LibTorch's unpickler]).
void drop_attributes(const IValue& value) {
  if (value.isGenericDict()) {
    GenericDict dict = value.toGenericDict();
    (void)dict.erase(IValue(detail::kDroppedStateKey));
    for (const auto& entry : dict) drop_attributes(entry.value());
  } else if (value.isList()) {
    for (const IValue& item : value.toListRef()) drop_attributes(item);
  } else if (value.isTuple()) {
    for (const IValue& item : value.toTupleRef().elements()) drop_attributes(item);
  }
}

// The caller's bytes as the archive reader's input, read in place (no copy of the archive).
class BytesAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesAdapter(const std::vector<char>& bytes) : bytes_(bytes) {}
  std::size_t size() const override { return bytes_.size(); }
  std::size_t read(std::uint64_t pos, void* buf, std::size_t n, const char*) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<std::size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<char>& bytes_;
};

// What torch.save's archive holds, Python's OrderedDicts read as dicts; tensors on the CPU.
IValue load_archive(caffe2::serialize::PyTorchStreamReader& reader) {
  const auto record = reader.getRecord("data.pkl");
  const std::string pickle =
      detail::plain_dicts(std::string(static_cast<const char*>(std::get<0>(record).get()),
                                      std::get<1>(record)));
  std::size_t pos = 0;
  torch::jit::Unpickler unpickler(
      [&](char* out, std::size_t size) {
        size = std::min(size, pickle.size() - pos);
        std::memcpy(out, pickle.data() + pos, size);
        pos += size;
        return size;
      },
      /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
      [&](const std::string& name) { return std::get<0>(reader.getRecord("data/" + name)); },
      c10::Device(c10::kCPU));
  unpickler.set_version(reader.version());
  IValue value;
  try {
    value = unpickler.parse_ivalue();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {  // e.g. std::out_of_range from a malformed stream
    TORCH_CHECK(false, "mixprec: LibTorch's unpickler cannot read this pickle: ", e.what());
  }
  drop_attributes(value);
  return value;
}

}  // namespace

c10::impl::GenericDict module_state_dict(const torch::nn::Module& model) {
  Named all;
  collect(model, "", all);
  GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : all) dict.insert(name, tensor.detach());
  return dict;
}

void load_module_state_dict(torch::nn::Module& model, const c10::impl::GenericDict& state_dict) {
  plan_module_load(model, state_dict)();
}

c10::impl::GenericDict optimizer_state_dict(const torch::optim::Optimizer& optimizer) {
  const OptimKind kind = kind_of(optimizer, "mixprec::optimizer_state_dict");
  GenericDict state(c10::IntType::get(), c10::AnyType::get());
  GenericList groups(c10::AnyType::get());
  std::int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    const auto& options = group.options();
    GenericDict g =
        kind == OptimKind::kSGD    ? sgd_group(static_cast<const SGDOptions&>(options))
        : kind == OptimKind::kAdam
            ? adam_group(static_cast<const AdamOptions&>(options), /*decoupled=*/false)
            : adam_group(static_cast<const AdamWOptions&>(options), /*decoupled=*/true);
    const bool amsgrad = kind == OptimKind::kAdam
                             ? static_cast<const AdamOptions&>(options).amsgrad()
                             : kind == OptimKind::kAdamW &&
                                   static_cast<const AdamWOptions&>(options).amsgrad();
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
  plan_optimizer_load(optimizer, state_dict)();
}

c10::IValue pickle_load(const std::vector<char>& bytes) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesAdapter>(bytes));
  return load_archive(reader);
}

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const GradScaler& scaler) {
  GenericDict checkpoint = new_dict();
  checkpoint.insert("model", module_state_dict(model));
  checkpoint.insert("optimizer", optimizer_state_dict(optimizer));
  checkpoint.insert("scaler", scaler.state_dict());
  const std::vector<char> bytes = pickle_save_untagged(checkpoint);
  // Written beside the target and renamed over it: a crash mid-write leaves the old file whole.
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    TORCH_CHECK(out, "mixprec::save_checkpoint: cannot write ", partial);
  }
  TORCH_CHECK(std::rename(partial.c_str(), path.c_str()) == 0,
              "mixprec::save_checkpoint: cannot rename ", partial, " to ", path);
}

void load_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, GradScaler& scaler) {
  constexpr const char* kWho = "mixprec::load_checkpoint";
  TORCH_CHECK(std::ifstream(path, std::ios::binary).good(), kWho, ": cannot open ", path);
  caffe2::serialize::PyTorchStreamReader reader(path);  // reads the records it needs, in place
  const IValue loaded = load_archive(reader);
  TORCH_CHECK(loaded.isGenericDict(), kWho, ": ", path, " holds a ", loaded.tagKind(),
              ", not a dict");
  const GenericDict checkpoint = loaded.toGenericDict();
  auto entry = [&](const char* key) {
    const IValue* value = find(checkpoint, key);
    TORCH_CHECK(value != nullptr && value->isGenericDict(), kWho, ": ", path,
                " has no dict under \"", key, "\" (expected \"model\", \"optimizer\" and "
                "\"scaler\", as torch.save({\"model\": model.state_dict(), ...}) writes)");
    return value->toGenericDict();
  };
  // Everything is checked before anything changes; the scaler's own load checks first too.
  const Commit load_model = plan_module_load(model, entry("model"));
  const Commit load_optimizer = plan_optimizer_load(optimizer, entry("optimizer"));
  scaler.load_state_dict(entry("scaler"));
  load_model();
  load_optimizer();
}

}  // namespace mixprec
