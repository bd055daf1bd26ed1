// mixprec's checkpoints (include/mixprec/checkpoint.h): Python's state_dict layout for modules,
// one file for model + optimizer + scaler, loaded all or nothing, and pickle_load, through
// mixprec's own reader of untrusted files (unpickle.h). The optimizers' layouts are in
// optimizer_dict.cpp.
#include "mixprec/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/grad_scaler.h"
#include "torch/checkpoint/dicts.h"
#include "torch/checkpoint/saving.h"
#include "torch/checkpoint/unpickle.h"

namespace mixprec {
namespace {

using c10::IValue;
using c10::impl::GenericDict;
using detail::Commit;
using detail::find;
using Named = std::vector<std::pair<std::string, at::Tensor>>;

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
    } else if (value->toTensor().layout() != c10::kStrided || value->toTensor().is_quantized()) {
      errors.push_back("\"" + name + "\" is a sparse or quantized tensor; only dense tensors load.");
    } else if (value->toTensor().sizes() != tensor.sizes()) {
      std::ostringstream message;
      message << "size mismatch for " << name << ": copying a param with shape "
              << value->toTensor().sizes() << " from checkpoint, the shape in current model is "
              << tensor.sizes() << ".";
      errors.push_back(message.str());
    } else {
      // Converted now where dtype or device differ, so that the commit is a plain copy.
      const at::Tensor& from = value->toTensor();
      const bool same = from.scalar_type() == tensor.scalar_type() && from.device() == tensor.device();
      copies.emplace_back(tensor, same ? from : from.to(tensor.options().requires_grad(false)));
    }
  }
  for (const auto& entry : state_dict) {
    const std::string key = entry.key().isString() ? entry.key().toStringRef()
                                                   : "<a " + entry.key().tagKind() + " key>";
    if (names.count(key) == 0) unexpected.push_back(key);
  }
  // PyTorch's order: missing keys, unexpected keys, then the other errors.
  if (!unexpected.empty()) {
    errors.insert(errors.begin(),
                  "Unexpected key(s) in state_dict: " + quoted_list(unexpected) + ".");
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

c10::IValue pickle_load(const std::vector<char>& bytes) {
  return detail::load_torch_save(detail::memory_source(bytes.data(), bytes.size()));
}

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const GradScaler& scaler) {
  GenericDict checkpoint = detail::new_dict();
  checkpoint.insert("model", module_state_dict(model));
  checkpoint.insert("optimizer", optimizer_state_dict(optimizer));
  checkpoint.insert("scaler", scaler.state_dict());
  detail::save_untagged(path, checkpoint, "mixprec::save_checkpoint");
}

void load_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, GradScaler& scaler) {
  constexpr const char* kWho = "mixprec::load_checkpoint";
  const IValue loaded = detail::load_torch_save(detail::file_source(path));
  TORCH_CHECK(loaded.isGenericDict(), kWho, ": ", path, " holds a ", loaded.tagKind(),
              ", not a dict");
  const GenericDict checkpoint = loaded.toGenericDict();
  auto entry = [&](const char* key) {
    const IValue* value = find(checkpoint, key);
    TORCH_CHECK(value != nullptr && value->isGenericDict(), kWho, ": ", path,
                " has no dict under \"", key,
                "\" (expected \"model\", \"optimizer\" and "
                "\"scaler\", as torch.save({\"model\": model.state_dict(), ...}) writes)");
    return value->toGenericDict();
  };
  // Everything is checked before anything changes (the three plans); the commits only copy and
  // assign what the plans made.
  const Commit load_model = plan_module_load(model, entry("model"));
  const Commit load_optimizer = detail::plan_optimizer_load(optimizer, entry("optimizer"));
  const Commit load_scaler = scaler.plan_load_state_dict(entry("scaler"));
  load_model();
  load_optimizer();
  load_scaler();
}

}  // namespace mixprec
