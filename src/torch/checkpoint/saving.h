// Internal: torch.save's archive of a value written as it is made, to a callback or durably to a
// file (file_writer.h): what pickle_save_untagged, save_checkpoint and the C ABI's saves share.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <functional>
#include <string>

namespace mixprec::detail {

/// The archive of `value` (pickle_save_untagged's bytes), handed to `write` piece by piece as
/// LibTorch's PyTorchStreamWriter makes it: each tensor's bytes go out from the tensor itself,
/// so the archive is never held in memory. An exception thrown by `write` stops the writing and
/// is rethrown once LibTorch's writer has finished (it must not see it: its destructor would end
/// the process).
void write_untagged(const c10::IValue& value,
                    const std::function<void(const void*, std::size_t)>& write);

/// write_untagged into a DurableFile at `path` (Note [Durable saves]); `who` names the caller in
/// messages.
void save_untagged(const std::string& path, const c10::IValue& value, const char* who);

}  // namespace mixprec::detail
