// The input of the structure-aware fuzz targets (fuzz_torch_save, fuzz_scaler_archive): a pickle
// and named records, written as a torch.save archive by LibTorch's own PyTorchStreamWriter (valid
// CRCs), then at most one zip field changed. See Note [Structure-aware torch.save fuzzing].
#pragma once

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::fuzz {

// Note [Structure-aware torch.save fuzzing]
// A mutation of a whole torch.save file almost always breaks a CRC-32 or a zip offset, so the
// zip reader refuses it and the pickle's storages, their records and the tensors on them are
// barely reached. These targets fuzz the parts instead: the input is a small container, and the
// target writes it as a valid archive (PyTorchStreamWriter computes sizes, offsets and CRCs).
// Layout, every length clamped to what is left, so that any bytes parse:
//   byte 0      entry: reserved for a target that calls several loads (none does yet)
//   byte 1      zip change after writing (ZipChange below; most values: none)
//   byte 2      which record it applies to
//   bytes 3-6   its argument, little-endian
//   u32 n, n bytes               data.pkl
//   repeated: u8 n, n bytes name (within the archive's folder), u32 m, m bytes data
// The custom mutator (torch_save_mutator.h) edits the pickle opcode by opcode and the records as
// records, so that its edits reach storages, counts, offsets, strides, dtypes, the memo and
// nesting with the archive around them still valid.
struct Input {
  std::uint8_t entry = 0;
  std::uint8_t zip_change = 0;
  std::uint8_t zip_record = 0;
  std::uint32_t zip_arg = 0;
  std::string pickle;
  std::vector<std::pair<std::string, std::string>> records;
};

constexpr std::size_t kHeaderSize = 7;
constexpr std::size_t kMaxRecords = 128;  // torch_save_2_15.pt has 79

inline std::uint32_t get_u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}
inline void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

/// Any bytes as an Input; returns false when there are fewer than the header's bytes.
inline bool parse(const std::uint8_t* data, std::size_t size, Input& in) {
  in = Input();
  if (size < kHeaderSize) return false;
  in.entry = data[0];
  in.zip_change = data[1];
  in.zip_record = data[2];
  in.zip_arg = get_u32(data + 3);
  std::size_t pos = kHeaderSize;
  auto take = [&](std::size_t want) {
    const std::size_t n = std::min(want, size - pos);
    std::string out(reinterpret_cast<const char*>(data) + pos, n);
    pos += n;
    return out;
  };
  auto length = [&](int bytes) -> std::size_t {
    if (size - pos < static_cast<std::size_t>(bytes)) {
      pos = size;
      return 0;
    }
    const std::size_t n = bytes == 1 ? data[pos] : get_u32(data + pos);
    pos += static_cast<std::size_t>(bytes);
    return n;
  };
  in.pickle = take(length(4));
  while (pos < size && in.records.size() < kMaxRecords) {
    std::string name = take(length(1));
    std::string bytes = take(length(4));
    in.records.emplace_back(std::move(name), std::move(bytes));
  }
  return true;
}

inline std::string serialize(const Input& in) {
  std::string out;
  out += static_cast<char>(in.entry);
  out += static_cast<char>(in.zip_change);
  out += static_cast<char>(in.zip_record);
  put_u32(out, in.zip_arg);
  put_u32(out, static_cast<std::uint32_t>(in.pickle.size()));
  out += in.pickle;
  for (const auto& [name, bytes] : in.records) {
    out += static_cast<char>(std::min<std::size_t>(name.size(), 255));
    out += name.substr(0, 255);
    put_u32(out, static_cast<std::uint32_t>(bytes.size()));
    out += bytes;
  }
  return out;
}

/// A record name miniz writes as given: [A-Za-z0-9_.-/], not starting or ending with '/' (a
/// folder's entry), and not the one LibTorch 2.x's writer adds itself.
inline bool writable_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.back() == '/' || name.size() > 200) return false;
  if (name == ".data/serialization_id") return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-' || c == '/';
    if (!ok) return false;
  }
  return true;
}

// ---- the archive ---------------------------------------------------------------------------

inline std::uint32_t read_le(const std::vector<char>& b, std::size_t at, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
inline void write_le(std::vector<char>& b, std::size_t at, int bytes, std::uint32_t v) {
  for (int i = 0; i < bytes; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

/// Where a record's headers are in an archive PyTorchStreamWriter wrote (no zip64: the inputs
/// are small).
struct ZipEntry {
  std::size_t local = 0, central = 0, data = 0, size = 0;
};

inline std::vector<ZipEntry> zip_entries(const std::vector<char>& zip) {
  std::vector<ZipEntry> out;
  if (zip.size() < 22 || read_le(zip, zip.size() - 22, 4) != 0x06054b50) return out;
  const std::size_t end = zip.size() - 22;
  std::size_t at = read_le(zip, end + 16, 4);
  for (std::uint32_t i = 0, n = read_le(zip, end + 10, 2); i < n && at + 46 <= end; ++i) {
    ZipEntry e;
    e.central = at;
    e.local = read_le(zip, at + 42, 4);
    e.size = read_le(zip, at + 20, 4);
    if (e.local + 30 > zip.size()) break;
    e.data = e.local + 30 + read_le(zip, e.local + 26, 2) + read_le(zip, e.local + 28, 2);
    out.push_back(e);
    at += 46 + read_le(zip, at + 28, 2) + read_le(zip, at + 30, 2) + read_le(zip, at + 32, 2);
  }
  return out;
}

/// What an input may change in the written archive (byte 1 of the input modulo 32; the values
/// past the last kind change nothing, so most inputs keep a valid archive).
enum ZipChange : std::uint8_t {
  kCrcZeroAndFlip = 1,  // CRC 0 in both headers (unchecked), then one data byte changed
  kDeflated,            // compression method 8 in both headers
  kCentralSize,         // the central directory's sizes set to the argument
  kLocalSize,           // the local header's sizes set to the argument
  kLocalOffset,         // the central directory's local header offset plus the argument
  kSameName,            // renamed to the previous record's name where the lengths agree
  kFlags,               // general purpose flags (encryption, data descriptor)
  kTruncate,            // the file cut to the argument's length
  kAppend,              // bytes appended after the end record (a comment the record omits)
  kAnyByte,             // one byte anywhere xor-ed with the argument's low byte
  kNumZipChanges
};

inline void change_zip(std::vector<char>& zip, const Input& in) {
  const int kind = in.zip_change % 32;
  if (kind == 0 || kind >= kNumZipChanges) return;
  const std::vector<ZipEntry> entries = zip_entries(zip);
  if (entries.empty()) return;
  const std::size_t index = in.zip_record % entries.size();
  const ZipEntry& e = entries[index];
  const std::uint32_t arg = in.zip_arg;
  switch (kind) {
    case kCrcZeroAndFlip:
      write_le(zip, e.local + 14, 4, 0);
      write_le(zip, e.central + 16, 4, 0);
      if (e.size > 0 && e.data + e.size <= zip.size()) {
        zip[e.data + (arg >> 8) % e.size] ^= static_cast<char>(arg | 1);
      }
      return;
    case kDeflated:
      write_le(zip, e.local + 8, 2, 8);
      write_le(zip, e.central + 10, 2, 8);
      return;
    case kCentralSize:
      write_le(zip, e.central + 20, 4, arg);
      write_le(zip, e.central + 24, 4, arg);
      return;
    case kLocalSize:
      write_le(zip, e.local + 18, 4, arg);
      write_le(zip, e.local + 22, 4, arg);
      return;
    case kLocalOffset:
      write_le(zip, e.central + 42, 4, static_cast<std::uint32_t>(e.local + arg));
      return;
    case kSameName: {
      if (index == 0) return;
      const ZipEntry& p = entries[index - 1];
      const std::uint32_t n = read_le(zip, e.central + 28, 2);
      if (read_le(zip, p.central + 28, 2) != n) return;
      for (std::uint32_t i = 0; i < n; ++i) {
        zip[e.central + 46 + i] = zip[p.central + 46 + i];
        zip[e.local + 30 + i] = zip[p.central + 46 + i];
      }
      return;
    }
    case kFlags:
      write_le(zip, e.local + 6, 2, arg & 0xffff);
      write_le(zip, e.central + 8, 2, arg & 0xffff);
      return;
    case kTruncate:
      zip.resize(std::min<std::size_t>(zip.size(), arg % (zip.size() + 1)));
      return;
    case kAppend:
      zip.insert(zip.end(), arg % 64 + 1, static_cast<char>(arg >> 8));
      return;
    case kAnyByte:
      zip[(arg >> 8) % zip.size()] ^= static_cast<char>(arg | 1);
      return;
    default:
      return;
  }
}

/// The archive of an input, in the folder "archive" as LibTorch writes it: data.pkl first, then
/// the records in order (a name given twice, or one miniz would not write, is skipped), then the
/// input's zip change.
inline std::vector<char> write_archive(const Input& in) {
  std::vector<char> zip;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* buf, std::size_t n) {
      const auto* p = static_cast<const char*>(buf);
      zip.insert(zip.end(), p, p + n);
      return n;
    });
    std::set<std::string> written{"data.pkl"};
    writer.writeRecord("data.pkl", in.pickle.data(), in.pickle.size());
    for (const auto& [name, bytes] : in.records) {
      if (!writable_name(name) || !written.insert(name).second) continue;
      writer.writeRecord(name, bytes.data(), bytes.size());
    }
    writer.writeEndOfFile();
  }
  change_zip(zip, in);
  return zip;
}

}  // namespace mixprec::fuzz
