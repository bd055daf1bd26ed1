// mixprec::pickle_save_untagged (include/mixprec/serialize.h): torch::pickle_save's archive,
// written with the pickler's type tags switched off, streamed to memory or durably to a file.
#include "mixprec/serialize.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "torch/checkpoint/file_writer.h"
#include "torch/checkpoint/saving.h"

namespace mixprec {

namespace detail {

void write_untagged(const c10::IValue& value,
                    const std::function<void(const void*, std::size_t)>& write) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, std::size_t size) { pickle.insert(pickle.end(), data, data + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();

  // LibTorch's writer sees every write succeed: one it saw fail would make its destructor throw,
  // which ends the process. The first failure is kept and rethrown when it is done.
  std::exception_ptr failed;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    if (!failed) {
      try {
        write(data, size);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  if (failed) std::rethrow_exception(failed);
}

void save_untagged(const std::string& path, const c10::IValue& value, const char* who) {
  DurableFile file(path, who);
  write_untagged(value, [&](const void* data, std::size_t size) { file.write(data, size); });
  file.commit();
}

}  // namespace detail

std::vector<char> pickle_save_untagged(const c10::IValue& value) {
  std::vector<char> archive;
  detail::write_untagged(value, [&](const void* data, std::size_t size) {
    const auto* bytes = static_cast<const char*>(data);
    archive.insert(archive.end(), bytes, bytes + size);
  });
  return archive;
}

void pickle_save_untagged(const c10::IValue& value, const std::string& path) {
  detail::save_untagged(path, value, "mixprec::pickle_save_untagged");
}

}  // namespace mixprec
