// mixprec::pickle_save_untagged (include/mixprec/serialize.h): torch::pickle_save's archive,
// written with the pickler's type tags switched off.
#include "mixprec/serialize.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cstddef>
#include <vector>

namespace mixprec {

std::vector<char> pickle_save_untagged(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, std::size_t size) { pickle.insert(pickle.end(), data, data + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();

  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    const auto* bytes = static_cast<const char*>(data);
    archive.insert(archive.end(), bytes, bytes + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return archive;
}

}  // namespace mixprec
