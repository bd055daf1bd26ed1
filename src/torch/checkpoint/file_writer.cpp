// DurableFile (file_writer.h, Note [Durable saves]): the new file beside the target, its mode and
// owner, the write loop, and fsync / rename / fsync of the folder.
#include "torch/checkpoint/file_writer.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace mixprec::detail {
namespace {

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

DurableFile::DurableFile(const std::string& path, const char* who) : who_(who), path_(path) {
  // The file a symlink names, as open() follows it (the link itself stays).
  target_ = path;
  for (int links = 0;; ++links) {
    struct stat st {};
    if (::lstat(target_.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) break;
    if (links == 40) fail("open", ELOOP, "");
    std::vector<char> link(PATH_MAX + 1);
    const ssize_t n = ::readlink(target_.c_str(), link.data(), link.size());
    if (n < 0) fail("readlink", errno, "");
    const std::string to(link.data(), static_cast<std::size_t>(n));
    target_ = to.front() == '/' ? to : folder_of(target_) + "/" + to;
  }
  folder_ = folder_of(target_);
  struct stat old {};
  const bool existed = ::stat(target_.c_str(), &old) == 0;
  if (existed && !S_ISREG(old.st_mode)) fail("open", EISDIR, ": the target is not a regular file");
  std::random_device random;
  char suffix[64];
  for (int attempt = 0; fd_ < 0; ++attempt) {
    std::snprintf(suffix, sizeof suffix, ".tmp-%ld-%08x%08x", static_cast<long>(::getpid()),
                  random(), random());
    temporary_ = folder_ + "/." + name_of(target_) + suffix;
    // O_EXCL | O_NOFOLLOW: a file or link planted under this name is never opened.
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt == 16)) {
      const int error = errno;
      temporary_.clear();  // not ours: never removed
      fail("open", error, " (a new file in " + folder_ + ")");
    }
  }
  if (existed) {
    // The old file's owner where the process may give it (root), then its mode bits.
    if (old.st_uid != ::geteuid() || old.st_gid != ::getegid()) {
      (void)!::fchown(fd_, old.st_uid, old.st_gid);
    }
    if (::fchmod(fd_, old.st_mode & 07777) != 0) fail("fchmod", errno, "");
  }
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
}

void DurableFile::write(const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, std::min<std::size_t>(size, std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : ENOSPC, "");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void DurableFile::commit() {
  if (::fsync(fd_) != 0) fail("fsync", errno, "");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", errno, "");
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) fail("rename", errno, "");
  committed_ = true;
  // The rename is durable once the folder is: fsync it too.
  const int folder = ::open(folder_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder < 0 || ::fsync(folder) != 0) {
    const int error = errno;
    if (folder >= 0) ::close(folder);
    fail(folder < 0 ? "open" : "fsync", error,
         " (of the folder " + folder_ + ", after the rename: the new file is in place but may not "
         "survive a power cut)");
  }
  ::close(folder);
}

void DurableFile::fail(const char* call, int error, const std::string& what) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
  TORCH_CHECK(false, who_, ": cannot save ", path_, target_ != path_ ? " (" + target_ + ")" : "",
              ": ", call, "() failed: ", std::strerror(error), what, "; ",
              committed_ ? "the new file replaced it" : "the file is as it was");
}

}  // namespace mixprec::detail
