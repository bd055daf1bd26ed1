// Internal: the zip container of torch.save's files, read by mixprec itself. Only what torch.save
// writes is accepted (stored records in one folder, zip64 where sizes need it), and every count,
// size and offset is checked against the file before memory is allocated or read for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mixprec::detail {

/// Where an archive's bytes come from: a file or the caller's memory. Reads are bounds-checked
/// by the caller (ZipArchive); read() throws c10::Error when the bytes cannot be had.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// The size, fixed when the source was opened.
  virtual std::uint64_t size() const = 0;
  /// Reads exactly `n` bytes at `offset` into `out`; offset + n <= size().
  virtual void read(std::uint64_t offset, void* out, std::size_t n) const = 0;
  /// For messages: the file's path, or "the bytes given".
  virtual const std::string& name() const = 0;
};

/// A file, opened read-only (its size taken once, at opening); throws c10::Error naming `path`
/// when it cannot be opened or is not a regular file.
std::unique_ptr<ByteSource> file_source(const std::string& path);

/// `size` bytes at `data`, which must outlive the source; not copied.
std::unique_ptr<ByteSource> memory_source(const void* data, std::size_t size);

/// One record of the archive.
struct ZipRecord {
  std::string name;           ///< within the archive's folder: "data.pkl", "data/0", "byteorder"
  std::uint64_t offset = 0;   ///< of its data in the source
  std::uint64_t size = 0;     ///< of its data (stored: no compression)
  std::uint32_t crc32 = 0;    ///< as the central directory states it
};

/// Note [mixprec's zip reader]
/// torch.save writes a zip archive of stored (uncompressed) records, all in one folder named
/// after the file, through LibTorch's PyTorchStreamWriter (miniz), with zip64 records where a
/// size or offset needs 64 bits. LibTorch's reader (miniz) inflates compressed records into
/// buffers of the size they declare (a 1 MB file took 1.2 GB) and takes the first of two
/// records of one name, where Python's zipfile takes the last (a scanner and the loader would
/// read different pickles). This reader accepts only torch.save's shape and refuses the rest
/// before allocating anything for it: an end record that ends the file (no comment), one disk,
/// a central directory inside the file with at most one entry per 46 of its bytes, every
/// record stored, unencrypted, named once, inside the first record's folder, its local header
/// agreeing with the central directory, its data before the central directory and overlapping
/// no other record. The CRC-32 of each record is checked as it is read, except a CRC of 0,
/// which torch.save writes with torch.serialization.set_crc32_options(False) (torch.load checks
/// no CRC at all).
class ZipArchive {
 public:
  /// Reads and checks the end records, the central directory and every local header; throws
  /// c10::Error naming the source and what is wrong.
  explicit ZipArchive(std::unique_ptr<ByteSource> source);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  /// The record of that name within the folder, or null.
  const ZipRecord* find(const std::string& name) const;
  /// Reads a record's data into `out` (record.size bytes), checking its CRC-32.
  void read(const ZipRecord& record, void* out) const;
  /// A whole record as bytes; throws when it is over `max_size` bytes.
  std::string read_bytes(const ZipRecord& record, std::uint64_t max_size) const;

  /// The folder every record is in ("archive", or the file's stem as torch.save names it).
  const std::string& folder() const { return folder_; }
  const ByteSource& source() const { return *source_; }

 private:
  std::unique_ptr<ByteSource> source_;
  std::string folder_;
  std::vector<ZipRecord> records_;  // sorted by name
};

}  // namespace mixprec::detail
