// mixprec::pickle_save_untagged: a GradScaler state_dict (or any IValue) in torch.save's format,
// as bytes or durably to a file, readable by Python's plain torch.load, whose weights_only
// default (torch >= 2.6) refuses what torch::pickle_save writes.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace mixprec {

/// The bytes of `value` in torch.save's zip format, like torch::pickle_save, but without the
/// TorchScript type tags that torch::pickle_save puts on every dict and list. Python's
/// `torch.load(path)` reads the result as plain Python values with its default
/// `weights_only=True` (torch 2.6 and later), which rejects torch::pickle_save's output
/// ("Unsupported global: GLOBAL torch.jit._pickle.restore_type_tag"). torch::pickle_load and
/// older Pythons read both.
///
/// To write a file, use the overload below, not these bytes: it streams and is durable.
std::vector<char> pickle_save_untagged(const c10::IValue& value);

/// The same archive written to the file `path` as mixprec::save_checkpoint writes (Note [Durable
/// saves], docs/checkpoints.md): streamed into a new file beside the target, fsynced, renamed
/// over it, the folder fsynced; a symlinked target is written through, a link planted anywhere
/// else is never followed, the old file's mode is kept. After a crash, a power cut or a full disk
/// `path` holds the old file or the new one, whole. Throws c10::Error naming the path and the
/// failing call, with nothing changed.
///
/// **Example**: pieces of a checkpoint beside mixprec::save_checkpoint's file
/// ```cpp
/// mixprec::pickle_save_untagged(scaler.state_dict(), "scaler.pt");
/// // Python: torch.amp.GradScaler("cuda").load_state_dict(torch.load("scaler.pt"))
/// ```
void pickle_save_untagged(const c10::IValue& value, const std::string& path);

}  // namespace mixprec
