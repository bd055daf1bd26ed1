// Internal: torch.save's files read by mixprec's own zip reader and restricted unpickler and only
// then made into LibTorch values; LibTorch's unpickler never sees these bytes.
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>

#include "torch/checkpoint/zip_archive.h"

namespace mixprec::detail {

/// The value torch.save (or mixprec, or torch::pickle_save) wrote to the archive in `source`,
/// its tensors on the CPU, each storage read once into memory of its own. Everything is checked
/// before a tensor's memory is allocated (docs/checkpoints.md, "Untrusted files"); anything
/// refused, and any other failure, throws c10::Error and nothing else.
c10::IValue load_torch_save(std::unique_ptr<ByteSource> source);

}  // namespace mixprec::detail
