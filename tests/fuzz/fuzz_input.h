// Shared by the libFuzzer targets that read torch.save's bytes: how an input becomes a file.
#pragma once

#include <caffe2/serialize/inline_container.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mixprec::fuzz {

/// The bytes of a file torch.save could have written, from a fuzzer's input: its first byte
/// picks the form. Even: the rest is the whole file (a zip archive). Odd: the rest is the pickle
/// (data.pkl, any protocol), stored in an archive here, so that the mutations reach the pickle
/// readers (mixprec's opcode walk, LibTorch's unpickler) instead of failing the zip's checksums.
inline std::vector<char> file_bytes(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return {};
  if (data[0] % 2 == 0) return std::vector<char>(data + 1, data + size);
  std::vector<char> file;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* buf, std::size_t n) {
    const auto* p = static_cast<const char*>(buf);
    file.insert(file.end(), p, p + n);
    return n;
  });
  writer.writeRecord("data.pkl", data + 1, size - 1);
  writer.writeEndOfFile();
  return file;
}

}  // namespace mixprec::fuzz
