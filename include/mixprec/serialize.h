// mixprec::pickle_save_untagged: a GradScaler state_dict (or any IValue) in torch.save's format,
// readable by Python's plain torch.load, whose weights_only default (torch >= 2.6) refuses what
// torch::pickle_save writes.
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace mixprec {

/// The bytes of `value` in torch.save's zip format, like torch::pickle_save, but without the
/// TorchScript type tags that torch::pickle_save puts on every dict and list. Python's
/// `torch.load(path)` reads the result as plain Python values with its default
/// `weights_only=True` (torch 2.6 and later), which rejects torch::pickle_save's output
/// ("Unsupported global: GLOBAL torch.jit._pickle.restore_type_tag"). torch::pickle_load and
/// older Pythons read both.
///
/// **Example**
/// ```cpp
/// std::vector<char> bytes = mixprec::pickle_save_untagged(scaler.state_dict());
/// std::ofstream("scaler.pt", std::ios::binary).write(bytes.data(), bytes.size());
/// // Python: torch.amp.GradScaler("cuda").load_state_dict(torch.load("scaler.pt"))
/// ```
std::vector<char> pickle_save_untagged(const c10::IValue& value);

}  // namespace mixprec
