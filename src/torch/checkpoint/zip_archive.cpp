// mixprec's reader of torch.save's zip container (zip_archive.h, Note [mixprec's zip reader]):
// the end records, the central directory and the local headers, each checked before use.
#include "torch/checkpoint/zip_archive.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

namespace mixprec::detail {
namespace {

constexpr std::uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50,
                        kEnd = 0x06054b50, kZip64End = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr std::uint64_t kEndSize = 22, kZip64EndSize = 56, kZip64LocatorSize = 20,
                        kCentralSize = 46, kLocalSize = 30;

std::uint64_t le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : name_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TORCH_CHECK(fd_ >= 0, "mixprec: cannot open ", path, ": open() failed: ",
                std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      const int error = errno;
      const bool regular = S_ISREG(st.st_mode);
      ::close(fd_);
      TORCH_CHECK(regular, "mixprec: ", path, " is not a regular file");
      TORCH_CHECK(false, "mixprec: cannot read ", path, ": fstat() failed: ",
                  std::strerror(error));
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~FileSource() override { ::close(fd_); }

  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void read(std::uint64_t offset, void* out, std::size_t n) const override {
    auto* dst = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, dst, std::min<std::size_t>(n, 1u << 30),
                                  static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      TORCH_CHECK(got >= 0, "mixprec: cannot read ", name_, " at byte ", offset,
                  ": pread() failed: ", std::strerror(errno));
      TORCH_CHECK(got > 0, "mixprec: ", name_, " ends at byte ", offset,
                  ", before its size when it was opened (", size_, " bytes): it changed while "
                  "being read");
      dst += got;
      offset += static_cast<std::uint64_t>(got);
      n -= static_cast<std::size_t>(got);
    }
  }

 private:
  std::string name_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, std::size_t size)
      : data_(static_cast<const char*>(data)), size_(size) {}
  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void read(std::uint64_t offset, void* out, std::size_t n) const override {
    if (n > 0) std::memcpy(out, data_ + offset, n);
  }

 private:
  const char* data_;
  std::size_t size_;
  std::string name_ = "the bytes given";
};

// What the end records say (zip64's where they are present).
struct Directory {
  std::uint64_t entries = 0, offset = 0, size = 0;
  std::uint64_t end = 0;  // where the central directory must end (the first end record)
};

class Parser {
 public:
  explicit Parser(const ByteSource& source) : source_(source), size_(source.size()) {}

  std::vector<ZipRecord> records(std::string& folder) {
    const Directory dir = directory();
    std::vector<unsigned char> cd(static_cast<std::size_t>(dir.size));
    source_.read(dir.offset, cd.data(), cd.size());
    std::vector<ZipRecord> records;
    std::vector<std::pair<std::uint64_t, std::size_t>> local;  // local header offset, record
    records.reserve(static_cast<std::size_t>(dir.entries));
    std::size_t pos = 0;
    for (std::uint64_t i = 0; i < dir.entries; ++i) {
      std::uint64_t local_offset = 0;
      records.push_back(central_entry(cd, pos, i, local_offset));
      local.emplace_back(local_offset, records.size() - 1);
    }
    check(pos == cd.size(), "its central directory has ", cd.size() - pos,
          " bytes after its last entry");
    check(!records.empty(), "it has no records");
    // One folder, the first record's, as LibTorch's reader takes it.
    const std::string& first = records.front().name;
    const std::size_t slash = first.find('/');
    check(slash != std::string::npos && slash > 0, "its first record \"", first,
          "\" is not in a folder (torch.save puts every record in one)");
    folder = first.substr(0, slash);
    for (ZipRecord& r : records) {
      check(r.name.size() > slash + 1 && r.name.compare(0, slash + 1, first, 0, slash + 1) == 0,
            "its record \"", r.name, "\" is not in the folder \"", folder,
            "\" of its first record (torch.save puts every record in one)");
    }
    // Local headers, in file order: each agrees with its entry, and no two records overlap.
    std::sort(local.begin(), local.end());
    std::uint64_t previous_end = 0;
    for (const auto& [offset, index] : local) {
      check(offset >= previous_end, "its record \"", records[index].name,
            "\" overlaps the one before it in the file");
      previous_end = local_header(records[index], offset, dir.offset);
    }
    for (ZipRecord& r : records) r.name.erase(0, slash + 1);
    std::sort(records.begin(), records.end(),
              [](const ZipRecord& a, const ZipRecord& b) { return a.name < b.name; });
    for (std::size_t i = 1; i < records.size(); ++i) {
      check(records[i].name != records[i - 1].name, "it has two records named \"", folder, "/",
            records[i].name, "\" (LibTorch's reader would take the first, Python's zipfile "
            "the last)");
    }
    return records;
  }

 private:
  template <typename... Args>
  void check(bool ok, const Args&... why) const {
    TORCH_CHECK(ok, "mixprec: ", source_.name(), " is not a zip archive as torch.save writes: ",
                why...);
  }

  std::vector<unsigned char> bytes(std::uint64_t offset, std::uint64_t n) const {
    std::vector<unsigned char> out(static_cast<std::size_t>(n));
    source_.read(offset, out.data(), out.size());
    return out;
  }

  // The end of central directory record: the file's last 22 bytes, without a comment (torch.save
  // writes none; with one, a second signature inside it could be the end record Python's
  // zipfile takes); then zip64's, if a locator precedes it.
  Directory directory() const {
    check(size_ >= kEndSize, "it has ", size_, " bytes, fewer than an end record");
    const std::vector<unsigned char> t = bytes(size_ - kEndSize, kEndSize);
    check(le(t.data(), 4) == kEnd && le(&t[20], 2) == 0,
          "its last 22 bytes are not an end of central directory record without a comment");
    const std::uint64_t at = 0, tail = kEndSize;
    const unsigned char* e = &t[at];
    Directory dir;
    dir.end = size_ - tail + at;
    check(le(e + 4, 2) == 0 && le(e + 6, 2) == 0, "it spans several disks");
    const std::uint64_t on_disk = le(e + 8, 2);
    dir.entries = le(e + 10, 2);
    dir.size = le(e + 12, 4);
    dir.offset = le(e + 16, 4);
    check(on_disk == dir.entries, "its end record counts ", on_disk, " entries on this disk and ",
          dir.entries, " in all");
    if (dir.end >= kZip64LocatorSize) {
      const std::vector<unsigned char> l = bytes(dir.end - kZip64LocatorSize, kZip64LocatorSize);
      if (le(l.data(), 4) == kZip64Locator) zip64(l.data(), dir);
    }
    check(dir.entries != 0xffff && dir.size != 0xffffffff && dir.offset != 0xffffffff,
          "its end record needs zip64's and there is none");
    check(dir.offset <= dir.end && dir.size <= dir.end - dir.offset,
          "its central directory (", dir.size, " bytes at ", dir.offset,
          ") is not inside the file before its end record (at ", dir.end, ")");
    check(dir.entries <= dir.size / kCentralSize, "its end record counts ", dir.entries,
          " entries, more than its central directory of ", dir.size, " bytes can hold");
    return dir;
  }

  void zip64(const unsigned char* locator, Directory& dir) const {
    check(le(locator + 4, 4) == 0 && le(locator + 16, 4) <= 1, "it spans several disks");
    const std::uint64_t at = le(locator + 8, 8);
    const std::uint64_t limit = dir.end - kZip64LocatorSize;
    check(at <= limit && kZip64EndSize <= limit - at, "its zip64 locator points at ", at,
          ", outside the file before it");
    const std::vector<unsigned char> z = bytes(at, kZip64EndSize);
    check(le(z.data(), 4) == kZip64End, "no zip64 end record where its locator points");
    check(le(&z[16], 4) == 0 && le(&z[20], 4) == 0, "it spans several disks");
    const std::uint64_t on_disk = le(&z[24], 8), entries = le(&z[32], 8);
    const std::uint64_t size = le(&z[40], 8), offset = le(&z[48], 8);
    check(on_disk == entries, "its zip64 end record counts ", on_disk, " entries on this disk and ",
          entries, " in all");
    // A field of the plain end record is either zip64's sentinel or the same value.
    check((dir.entries == 0xffff || dir.entries == entries) &&
              (dir.size == 0xffffffff || dir.size == size) &&
              (dir.offset == 0xffffffff || dir.offset == offset),
          "its end record and its zip64 end record disagree");
    dir.entries = entries;
    dir.size = size;
    dir.offset = offset;
    dir.end = at;
  }

  // One central directory entry at cd[pos], pos advanced past it.
  ZipRecord central_entry(const std::vector<unsigned char>& cd, std::size_t& pos, std::uint64_t i,
                          std::uint64_t& local_offset) const {
    check(cd.size() - pos >= kCentralSize, "its central directory ends inside entry ", i);
    const unsigned char* c = &cd[pos];
    check(le(c, 4) == kCentralHeader, "entry ", i, " of its central directory has no signature");
    const std::uint64_t flags = le(c + 8, 2), method = le(c + 10, 2);
    const std::uint64_t name_size = le(c + 28, 2), extra_size = le(c + 30, 2),
                        comment_size = le(c + 32, 2);
    check(cd.size() - pos - kCentralSize >= name_size + extra_size + comment_size,
          "its central directory ends inside entry ", i);
    ZipRecord r;
    r.name.assign(reinterpret_cast<const char*>(c + kCentralSize), name_size);
    r.crc32 = static_cast<std::uint32_t>(le(c + 16, 4));
    std::uint64_t compressed = le(c + 20, 4), size = le(c + 24, 4);
    local_offset = le(c + 42, 4);
    std::uint64_t disk = le(c + 34, 2);
    const unsigned char* extra = c + kCentralSize + name_size;
    if (compressed == 0xffffffff || size == 0xffffffff || local_offset == 0xffffffff ||
        disk == 0xffff) {
      // Zip64's extended information (header 1): the 8-byte values of the fields set to their
      // sentinel, in this order, then the disk's 4 bytes.
      const unsigned char* end = extra + extra_size;
      const unsigned char* field = extra;
      while (field != nullptr && end - field >= 4 && le(field, 2) != 1) {
        const std::uint64_t n = le(field + 2, 2);
        field = static_cast<std::uint64_t>(end - field - 4) >= n ? field + 4 + n : nullptr;
      }
      check(field != nullptr && end - field >= 4, "entry \"", r.name,
            "\" needs zip64 sizes and has none");
      const std::uint64_t n = le(field + 2, 2);
      check(static_cast<std::uint64_t>(end - field - 4) >= n, "entry \"", r.name,
            "\" has a zip64 field longer than its extra data");
      const unsigned char* value = field + 4;
      std::uint64_t left = n;
      auto take = [&](std::uint64_t& v, int bytes) {
        check(left >= static_cast<std::uint64_t>(bytes), "entry \"", r.name,
              "\" has a zip64 field too short for the sizes it replaces");
        v = le(value, bytes);
        value += bytes;
        left -= bytes;
      };
      if (size == 0xffffffff) take(size, 8);
      if (compressed == 0xffffffff) take(compressed, 8);
      if (local_offset == 0xffffffff) take(local_offset, 8);
      if (disk == 0xffff) take(disk, 4);
    }
    check(disk == 0, "entry \"", r.name, "\" is on another disk");
    check((flags & 1) == 0, "record \"", r.name, "\" is encrypted");
    check(method == 0, "record \"", r.name, "\" is compressed (method ", method,
          "); torch.save stores its records uncompressed");
    check(compressed == size, "record \"", r.name, "\" is stored with ", compressed,
          " bytes for a size of ", size);
    r.size = size;
    pos += kCentralSize + name_size + extra_size + comment_size;
    return r;
  }

  // Checks the local header of `r` at `offset` and sets where its data is; returns the offset
  // after its data. Everything must lie before the central directory at `limit`.
  std::uint64_t local_header(ZipRecord& r, std::uint64_t offset, std::uint64_t limit) const {
    check(offset <= limit && limit - offset >= kLocalSize, "record \"", r.name,
          "\" has its local header at ", offset, ", not before its central directory");
    const std::vector<unsigned char> h = bytes(offset, kLocalSize);
    check(le(h.data(), 4) == kLocalHeader, "record \"", r.name, "\" has no local header at ",
          offset);
    check((le(&h[6], 2) & 1) == 0 && le(&h[8], 2) == 0, "record \"", r.name,
          "\" is encrypted or compressed in its local header");
    const std::uint64_t name_size = le(&h[26], 2), extra_size = le(&h[28], 2);
    check(limit - offset - kLocalSize >= name_size + extra_size, "record \"", r.name,
          "\" has a local header that runs into its central directory");
    const std::vector<unsigned char> name = bytes(offset + kLocalSize, name_size);
    check(std::string(name.begin(), name.end()) == r.name, "record \"", r.name,
          "\" has another name in its local header");
    r.offset = offset + kLocalSize + name_size + extra_size;
    check(r.size <= limit - r.offset, "record \"", r.name, "\" has ", r.size,
          " bytes, which run past the start of its central directory");
    return r.offset + r.size;
  }

  const ByteSource& source_;
  const std::uint64_t size_;
};

}  // namespace

std::unique_ptr<ByteSource> file_source(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

std::unique_ptr<ByteSource> memory_source(const void* data, std::size_t size) {
  return std::make_unique<MemorySource>(data, size);
}

ZipArchive::ZipArchive(std::unique_ptr<ByteSource> source) : source_(std::move(source)) {
  records_ = Parser(*source_).records(folder_);
}

ZipArchive::~ZipArchive() = default;

const ZipRecord* ZipArchive::find(const std::string& name) const {
  const auto it = std::lower_bound(
      records_.begin(), records_.end(), name,
      [](const ZipRecord& r, const std::string& n) { return r.name < n; });
  return it != records_.end() && it->name == name ? &*it : nullptr;
}

void ZipArchive::read(const ZipRecord& record, void* out) const {
  // In pieces, each checksummed while it is still in cache.
  constexpr std::uint64_t kPiece = 1 << 20;
  auto* dst = static_cast<unsigned char*>(out);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::uint64_t done = 0; done < record.size;) {
    const std::uint64_t n = std::min(kPiece, record.size - done);
    source_->read(record.offset + done, dst + done, static_cast<std::size_t>(n));
    crc = crc32(crc, dst + done, static_cast<uInt>(n));
    done += n;
  }
  TORCH_CHECK(record.crc32 == 0 || crc == record.crc32, "mixprec: ", source_->name(),
              ": record \"", folder_, "/", record.name, "\" does not match its CRC-32 (",
              record.crc32, " stated, ", crc, " read): the file is damaged");
}

std::string ZipArchive::read_bytes(const ZipRecord& record, std::uint64_t max_size) const {
  TORCH_CHECK(record.size <= max_size, "mixprec: ", source_->name(), ": record \"", folder_, "/",
              record.name, "\" has ", record.size, " bytes, more than the ", max_size,
              " it may have");
  std::string out(static_cast<std::size_t>(record.size), '\0');
  read(record, out.data());
  return out;
}

}  // namespace mixprec::detail
