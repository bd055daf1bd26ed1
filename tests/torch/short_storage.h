// A torch.save archive whose storage records are cut short: what tests/fuzz found LibTorch 1.13's
// unpickler rebuilding tensors on unchecked (CheckpointTest.TensorsPastTheirStorageAreRefused and
// the errors walk).
#pragma once

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace mixprec::test {

/// `archive` with each storage record (data/...) cut to at most `keep` bytes; `storages` counts
/// them.
inline std::vector<char> cut_storages(const std::vector<char>& archive, std::size_t keep,
                                      std::size_t* storages = nullptr) {
  std::istringstream in(std::string(archive.begin(), archive.end()));
  caffe2::serialize::PyTorchStreamReader reader(&in);
  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return size;
  });
  if (storages != nullptr) *storages = 0;
  for (const std::string& name : reader.getAllRecords()) {
    if (name == ".data/version" || name == "version") continue;  // the writer adds its own
    auto [data, size] = reader.getRecord(name);
    if (name.rfind("data/", 0) == 0) {
      size = std::min(size, keep);
      if (storages != nullptr) ++*storages;
    }
    writer.writeRecord(name, data.get(), size);
  }
  writer.writeEndOfFile();
  return bytes;
}

}  // namespace mixprec::test
