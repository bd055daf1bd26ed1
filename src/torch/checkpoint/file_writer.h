// Internal: the one writer of every file mixprec writes (save_checkpoint, the C ABI's saves):
// a new file beside the target, written, flushed to the disk and renamed over the target
// (Note [Durable saves]).
#pragma once

#include <cstddef>
#include <string>

namespace mixprec::detail {

/// Note [Durable saves]
/// A checkpoint writer promises that the target holds the old file or the new one, whole, after
/// a process crash, a power cut or a full disk, and that a save touches nothing but its target.
/// SQLite's and LMDB's rule: write a new file, fsync it, rename it over the target, fsync the
/// folder (which makes the rename itself durable). Here:
/// - The target is `path`, or the file a symlink at `path` names (followed as torch.save's
///   open() follows it, to any depth up to 40 links); the new file is made in the target's own
///   folder, so that the rename stays within one file system.
/// - The new file's name is unique (".<name>.tmp-<pid>-<random>") and it is opened with
///   O_CREAT | O_EXCL | O_NOFOLLOW: a link planted under that name makes the open fail rather
///   than be followed, and two concurrent saves never share a file; the last rename wins and
///   each file is whole.
/// - The new file gets the old one's mode bits (and owner, where the process may give it), or
///   0666 & ~umask when there was none.
/// - Any failure, a full disk or RLIMIT_FSIZE included (write() fails with EFBIG where SIGXFSZ
///   is ignored; by default the signal ends the process), removes the new file and throws
///   c10::Error naming the path and the call that failed; the target is untouched. A failure of
///   the folder's fsync comes after the rename: the message says the new file is in place but
///   may not survive a power cut.
class DurableFile {
 public:
  /// Creates the new file beside the target of `path`; `who` prefixes messages.
  DurableFile(const std::string& path, const char* who);
  /// Removes the new file unless commit() ran.
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  /// Appends `size` bytes (the whole of them, or throws).
  void write(const void* data, std::size_t size);
  /// fsync(file), rename(new file, target), fsync(folder).
  void commit();

  /// The file written: `path`, or the file its symlinks name.
  const std::string& target() const { return target_; }

 private:
  [[noreturn]] void fail(const char* call, int error, const std::string& what);

  std::string who_, path_, target_, folder_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace mixprec::detail
