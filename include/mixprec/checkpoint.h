// One training checkpoint for C++ and Python: model, optimizer and GradScaler in one file of
// torch.save's format, laid out as PyTorch's AMP recipe saves it, readable both ways.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace mixprec {

class GradScaler;

/// Writes `{"model": ..., "optimizer": ..., "scaler": ...}` to `path` in torch.save's format,
/// each entry as Python's `state_dict()` has it (module_state_dict, optimizer_state_dict,
/// GradScaler::state_dict), without TorchScript type tags (pickle_save_untagged). Python 2.6
/// opens it with plain `torch.load(path)` (weights_only) and resumes from it with
/// `model.load_state_dict(c["model"])`, `optimizer.load_state_dict(c["optimizer"])` and
/// `scaler.load_state_dict(c["scaler"])`. The save is durable and atomic (docs/checkpoints.md):
/// a new file beside `path` (a symlink at `path` is written through), its records streamed from
/// the tensors, fsynced, renamed over the target, the folder fsynced; after a crash or a power
/// cut `path` holds the old checkpoint or the new one, whole. Throws c10::Error naming the path
/// and the failing call (a full disk, a missing folder), leaving the old file as it was.
///
/// **Example**
/// ```cpp
/// mixprec::save_checkpoint("ckpt.pt", *model, optimizer, scaler);
/// // ... later, or in another process, over the same model and optimizer layout:
/// mixprec::load_checkpoint("ckpt.pt", *model, optimizer, scaler);
/// ```
void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const GradScaler& scaler);

/// Loads a checkpoint written by save_checkpoint or by Python's
/// `torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
/// "scaler": scaler.state_dict()}, path)`. Every entry is checked before anything changes:
/// on a missing key, a shape mismatch or an optimizer of another kind or layout it throws
/// c10::Error naming what differs, and model, optimizer and scaler are as they were. The file is
/// read as pickle_load reads bytes (docs/checkpoints.md), each storage straight from the file.
void load_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, GradScaler& scaler);

/// Python's `model.state_dict()`: every parameter and buffer by its dotted name ("fc1.weight",
/// "bn.running_mean"), module by module in registration order, detached (they share memory
/// with the model).
c10::impl::GenericDict module_state_dict(const torch::nn::Module& model);

/// Python's `model.load_state_dict(state_dict)` with strict=True: copies each entry into the
/// parameter or buffer of that name. Throws, changing nothing, for missing or unexpected keys
/// and size mismatches (PyTorch's words: "Error(s) in loading state_dict for ...").
void load_module_state_dict(torch::nn::Module& model, const c10::impl::GenericDict& state_dict);

/// Python's `optimizer.state_dict()` for torch::optim's and mixprec::optim's SGD, Adam and
/// AdamW: `{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}`, with the
/// keys and value types of PyTorch 2.6's optimizer of the same name (Adam's `step` a float32
/// tensor, `betas` a tuple, the options LibTorch lacks at Python's defaults, e.g. `maximize`
/// False). Throws for other optimizers.
c10::impl::GenericDict optimizer_state_dict(const torch::optim::Optimizer& optimizer);

/// Python's `optimizer.load_state_dict(state_dict)`: the options of each param group and the
/// state of each parameter, matched by position. Throws, changing nothing, when the groups'
/// number or sizes differ, an option LibTorch cannot honour is set (`maximize` True), or a
/// value has the wrong type. Python's implementation choices (`foreach`, `fused`,
/// `capturable`, `differentiable`) and keys LibTorch has no place for (`initial_lr`) are
/// ignored.
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer,
                               const c10::impl::GenericDict& state_dict);

/// The value in a torch.save file's bytes (Python's torch.save, torch::pickle_save,
/// pickle_save_untagged), read by mixprec's own zip reader and restricted unpickler, made for
/// untrusted files (docs/checkpoints.md): only state dicts' values and dense tensors, every
/// storage a record of exactly its size, every tensor inside its storage, limits on nesting,
/// sharing and dict keys. An `OrderedDict` (the type of `model.state_dict()`) is a dict, which
/// LibTorch's torch::pickle_load refuses (pytorch/pytorch#36577). Tensors are on the CPU, each
/// storage read once and shared as torch.load shares it. Anything refused throws c10::Error,
/// naming what and where, and nothing else is thrown.
c10::IValue pickle_load(const std::vector<char>& bytes);

}  // namespace mixprec
