// The C ABI's files and streams (include/mixprec/c_api.h, "files and streams"): a binding's
// reader callback as the source mixprec's reader of untrusted files reads, and its writer
// callback as the sink the saves stream into. Shared by c_api.cpp and c_api_optim.cpp.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <string>

#include "c/guard.h"
#include "mixprec/c_api.h"
#include "torch/checkpoint/zip_archive.h"

namespace mixprec::c_api {

/// A binding's stream of `size` bytes, read through its callback.
class CallbackSource final : public detail::ByteSource {
 public:
  CallbackSource(mixprec_read_fn read, void* context, std::uint64_t size, const char* call)
      : read_(read), context_(context), size_(size),
        name_(std::string("the stream given to ") + call) {}
  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void read(std::uint64_t offset, void* out, std::size_t n) const override {
    const int status = read_(context_, offset, out, n);
    TORCH_CHECK(status == 0, "mixprec: ", name_, ": its reader failed reading ", n,
                " bytes at byte ", offset, " (it returned ", status, ")");
  }

 private:
  mixprec_read_fn read_;
  void* context_;
  std::uint64_t size_;
  std::string name_;
};

inline std::unique_ptr<detail::ByteSource> callback_source(mixprec_read_fn read, void* context,
                                                           std::uint64_t size, const char* call) {
  return std::make_unique<CallbackSource>(require(read, call, "read"), context, size, call);
}

/// Hands bytes to a binding's writer callback; a failure it reports throws, naming the call.
inline auto callback_sink(mixprec_write_fn write, void* context, const char* call) {
  require(write, call, "write");
  return [write, context, call](const void* data, std::size_t size) {
    const int status = write(context, data, size);
    TORCH_CHECK(status == 0, call, ": the writer failed writing ", size, " bytes (it returned ",
                status, ")");
  };
}

}  // namespace mixprec::c_api
