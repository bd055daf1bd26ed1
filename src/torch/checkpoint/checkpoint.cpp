// mixprec's checkpoints (include/mixprec/checkpoint.h): Python's state_dict layout for modules,
// one file for model + optimizer + scaler, and a torch::pickle_load that reads Python's
// OrderedDicts. The optimizers' layouts are in optimizer_dict.cpp.
#include "mixprec/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/grad_scaler.h"
#include "mixprec/serialize.h"
#include "torch/checkpoint/dicts.h"
#include "torch/checkpoint/python_pickle.h"

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

// The size of each storage record the unpickler was given, by its data's address.
using RecordSizes = std::map<const void*, std::size_t>;

// Refuses a tensor that reaches past the bytes its storage was read from. LibTorch's unpickler
// sizes a storage by the element count its pickle states, whatever the size of the record it
// reads, and rebuilds the tensor on it with the pickle's offset, sizes and strides, unchecked
// (LibTorch 1.13: tests/fuzz found 4 floats on an empty record, whose copy read address 0).
void check_storage(const at::Tensor& t, const RecordSizes& records) {
  if (!t.defined() || t.numel() == 0 || !t.has_storage()) return;
  __extension__ typedef unsigned __int128 Wide;  // sizes and strides come from the file
  std::size_t have = t.storage().nbytes();
  const auto record = records.find(t.storage().data());
  if (record != records.end()) have = std::min(have, record->second);
  const Wide bytes = have;
  TORCH_CHECK(t.storage_offset() >= 0, "mixprec: a tensor in this file has storage offset ",
              t.storage_offset());
  Wide last = static_cast<Wide>(t.storage_offset());  // the last element's index
  for (std::int64_t d = 0; d < t.dim() && last < bytes; ++d) {
    TORCH_CHECK(t.stride(d) >= 0, "mixprec: a tensor in this file has strides ", t.strides());
    last += static_cast<Wide>(t.size(d) - 1) * static_cast<Wide>(t.stride(d));
  }
  TORCH_CHECK(last < bytes && (last + 1) * t.element_size() <= bytes,
              "mixprec: a tensor in this file reaches past its storage: sizes ", t.sizes(),
              ", strides ", t.strides(), ", storage offset ", t.storage_offset(), " and ",
              t.element_size(), "-byte elements on a storage of ", have, " bytes");
}

// Removes what plain_dicts() filed under kDroppedStateKey (Note [Python's OrderedDicts in
// LibTorch's unpickler]), and checks each tensor's storage.
void tidy(const IValue& value, const RecordSizes& records) {
  if (value.isTensor()) {
    check_storage(value.toTensor(), records);
  } else if (value.isGenericDict()) {
    GenericDict dict = value.toGenericDict();
    (void)dict.erase(IValue(detail::kDroppedStateKey));
    for (const auto& entry : dict) tidy(entry.value(), records);
  } else if (value.isList()) {
    for (const IValue& item : value.toListRef()) tidy(item, records);
  } else if (value.isTuple()) {
    for (const IValue& item : value.toTupleRef().elements()) tidy(item, records);
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
  const std::string pickle = detail::plain_dicts(
      std::string(static_cast<const char*>(std::get<0>(record).get()), std::get<1>(record)));
  std::size_t pos = 0;
  RecordSizes records;
  torch::jit::Unpickler unpickler(
      [&](char* out, std::size_t size) {
        size = std::min(size, pickle.size() - pos);
        std::memcpy(out, pickle.data() + pos, size);
        pos += size;
        return size;
      },
      /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
      [&](const std::string& name) {
        auto [data, size] = reader.getRecord("data/" + name);
        records[data.get()] = size;
        return std::move(data);
      },
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
  tidy(value, records);
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

c10::IValue pickle_load(const std::vector<char>& bytes) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesAdapter>(bytes));
  return load_archive(reader);
}

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const GradScaler& scaler) {
  GenericDict checkpoint = detail::new_dict();
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
                " has no dict under \"", key,
                "\" (expected \"model\", \"optimizer\" and "
                "\"scaler\", as torch.save({\"model\": model.state_dict(), ...}) writes)");
    return value->toGenericDict();
  };
  // Everything is checked before anything changes; the scaler's own load checks first too.
  const Commit load_model = plan_module_load(model, entry("model"));
  const Commit load_optimizer = detail::plan_optimizer_load(optimizer, entry("optimizer"));
  scaler.load_state_dict(entry("scaler"));
  load_model();
  load_optimizer();
}

}  // namespace mixprec
