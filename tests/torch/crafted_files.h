// Crafted torch.save files for the tests of mixprec's reader of untrusted files: pickles written
// opcode by opcode, archives written by LibTorch's own PyTorchStreamWriter (valid CRCs), and the
// zip fields an attacker would change afterwards.
#pragma once

#include <caffe2/serialize/inline_container.h>

#include <mixprec/serialize.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::test {

/// A string literal's bytes, NULs included.
template <std::size_t N>
std::string raw(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

/// A pickle written opcode by opcode (protocol 2 unless proto() says otherwise).
class Pickle {
 public:
  Pickle() { bytes_ = std::string("\x80\x02", 2); }
  Pickle& op(const std::string& raw) { bytes_ += raw; return *this; }
  Pickle& op(char code) { bytes_ += code; return *this; }
  Pickle& mark() { return op('('); }
  Pickle& none() { return op('N'); }
  Pickle& boolean(bool b) { return op(b ? '\x88' : '\x89'); }
  Pickle& integer(std::int64_t v) {  // LONG1 of 8 bytes: any int64
    bytes_ += "\x8a\x08";
    for (int i = 0; i < 8; ++i) bytes_ += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
    return *this;
  }
  Pickle& small(int v) { bytes_ += 'K'; bytes_ += static_cast<char>(v); return *this; }
  Pickle& str(const std::string& s) {
    bytes_ += 'X';
    for (int i = 0; i < 4; ++i) bytes_ += static_cast<char>((s.size() >> (8 * i)) & 0xff);
    bytes_ += s;
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) {
    bytes_ += 'c' + module + '\n' + name + '\n';
    return *this;
  }
  Pickle& put(int index) { bytes_ += 'q'; bytes_ += static_cast<char>(index); return *this; }
  Pickle& get(int index) { bytes_ += 'h'; bytes_ += static_cast<char>(index); return *this; }
  /// The persistent id torch.save writes for a storage: ('storage', torch.<cls>, key, 'cpu', n).
  Pickle& storage(const std::string& cls, const std::string& key, std::int64_t count) {
    mark().str("storage").global("torch", cls).str(key).str("cpu").integer(count).op('t');
    return op('Q');
  }
  /// _rebuild_tensor_v2(storage, offset, sizes, strides, False, OrderedDict()), as torch.save
  /// writes a tensor.
  Pickle& tensor(const std::string& cls, const std::string& key, std::int64_t count,
                 std::int64_t offset, const std::vector<std::int64_t>& sizes,
                 const std::vector<std::int64_t>& strides) {
    global("torch._utils", "_rebuild_tensor_v2").mark();
    storage(cls, key, count).integer(offset);
    mark();
    for (std::int64_t s : sizes) integer(s);
    op('t').mark();
    for (std::int64_t s : strides) integer(s);
    op('t').boolean(false).global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
  std::string stop() const { return bytes_ + '.'; }
  /// The opcodes after PROTO, to splice into another pickle.
  std::string body() const { return bytes_.substr(2); }

 private:
  std::string bytes_;
};

/// A torch.save file, written by LibTorch's PyTorchStreamWriter: data.pkl, then `records`
/// (name within the folder, bytes), in the folder "archive".
inline std::vector<char> archive(const std::string& pickle,
                                 const std::vector<std::pair<std::string, std::string>>& records = {}) {
  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return size;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [name, data] : records) writer.writeRecord(name, data.data(), data.size());
  writer.writeEndOfFile();
  return bytes;
}

/// The opcodes of `p` after PROTO, to splice into another pickle.
inline std::string body(const Pickle& p) { return p.body(); }

/// The opcodes LibTorch's pickler writes for `value` (mixprec::pickle_save_untagged), without
/// PROTO and STOP, to splice into another pickle (tensors are not kept: their records are not).
inline std::string pickle_body(const c10::IValue& value) {
  const std::vector<char> file = pickle_save_untagged(value);
  std::istringstream in(std::string(file.begin(), file.end()));
  caffe2::serialize::PyTorchStreamReader reader(&in);
  const auto [data, size] = reader.getRecord("data.pkl");
  const std::string pickle(static_cast<const char*>(data.get()), size);
  return pickle.substr(2, pickle.size() - 3);
}

/// The raw bytes of `n` floats.
inline std::string float_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

/// The headers of one record in a zip file: where its local header and central directory
/// entry start. For tests that change fields as an attacker would.
struct ZipEntry {
  std::size_t local = 0, central = 0;
};

inline std::uint32_t read_le(const std::vector<char>& b, std::size_t at, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
inline void write_le(std::vector<char>& b, std::size_t at, int bytes, std::uint32_t v) {
  for (int i = 0; i < bytes; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

/// The record whose name ends with `suffix` (the central directory read without checks: these
/// are the tests' own files).
inline ZipEntry find_entry(const std::vector<char>& zip, const std::string& suffix) {
  const std::size_t end = zip.size() - 22;
  std::size_t at = read_le(zip, end + 16, 4);
  for (std::uint32_t i = 0, n = read_le(zip, end + 10, 2); i < n; ++i) {
    const std::uint32_t name_size = read_le(zip, at + 28, 2);
    const std::string name(zip.data() + at + 46, name_size);
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return {read_le(zip, at + 42, 4), at};
    }
    at += 46 + name_size + read_le(zip, at + 30, 2) + read_le(zip, at + 32, 2);
  }
  throw std::runtime_error("no record " + suffix);
}

/// Renames a record in both its headers; the new name has the old one's length.
inline void rename_entry(std::vector<char>& zip, const std::string& from, const std::string& to) {
  if (from.size() != to.size()) throw std::runtime_error("rename_entry keeps the length");
  const ZipEntry e = find_entry(zip, from);
  const std::uint32_t size = read_le(zip, e.central + 28, 2);
  std::copy(to.begin(), to.end(), zip.begin() + static_cast<std::ptrdiff_t>(e.central + 46 + size - from.size()));
  std::copy(to.begin(), to.end(), zip.begin() + static_cast<std::ptrdiff_t>(e.local + 30 + size - from.size()));
}

}  // namespace mixprec::test
