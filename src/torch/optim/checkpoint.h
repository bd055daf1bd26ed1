// Loading a fused optimizer's checkpoint (mixprec::optim::*::load): torch::optim's archive format,
// read so that a checkpoint written by LibTorch 1.13 loads correctly on LibTorch 2.x as well.
#pragma once

#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>
#include <torch/version.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "torch/optim/adapter.h"

namespace mixprec::optim::detail {

// Note [Optimizer checkpoints across LibTorch versions]
// torch::optim's archive names each parameter by its TensorImpl's address, twice: as the key of
// its state ("state/<key>") and in its param group's list ("param_groups/<i>/params/<j>"). At
// load, the saved group lists map the old keys to the live parameters, in order. LibTorch 1.13
// prints the address with operator<< (hex, "0x55d0c2a4b8c0"); 2.x writes it as a decimal number
// and parses every key back with std::stoull, which reads a hex key as 0. So on 2.x a 1.13
// checkpoint files all its states under the one key 0: torch::optim's load gives the first
// parameter the last state read (of another parameter, whatever its shape) and every other
// parameter a null state, which its next step() dereferences. mixprec never turns the keys into
// numbers: it matches the saved group lists to the saved states by the keys' text, as 1.13's
// loader does, which is right for both formats. The rest is torch::optim's own behaviour on the
// LibTorch at hand (including 2.x's loading of each group's saved options over the live ones).
// tests/torch/optim_checkpoint_test.cpp loads committed 1.13 checkpoints on both versions.

/// Loads what save() (mixprec's or torch::optim's, from LibTorch 1.13 or 2.x) wrote into
/// `optimizer`: its states by parameter position, and its param groups' options.
template <typename ParamState, typename Options>
void load_optimizer(torch::serialize::InputArchive& archive, torch::optim::Optimizer& optimizer) {
  if constexpr (std::is_same_v<StateKey, std::string>) {
    // LibTorch 1.13 matches keys as text already.
    torch::optim::serialize<ParamState, Options>(archive, optimizer);
  } else {
    c10::IValue version;
    archive.read("pytorch_version", version);
    TORCH_CHECK(version.isString() && version.toStringRef() == "1.5.0",
                "optimizer checkpoint: unknown format (pytorch_version ",
                version.isString() ? version.toStringRef() : std::string("missing"),
                "; torch::optim writes 1.5.0)");
    torch::serialize::InputArchive state_archive;
    archive.read("state", state_archive);
    std::map<std::string, std::unique_ptr<ParamState>> saved_state;
    for (const std::string& key : state_archive.keys()) {
      torch::serialize::InputArchive param_archive;
      state_archive.read(key, param_archive);
      auto state = std::make_unique<ParamState>();
      state->serialize(param_archive);
      saved_state[key] = std::move(state);
    }
    torch::serialize::InputArchive groups_archive;
    archive.read("param_groups", groups_archive);
    std::vector<std::pair<std::vector<std::string>, std::unique_ptr<torch::optim::OptimizerOptions>>>
        saved_groups;
    torch::optim::detail::serialize<Options>(groups_archive, saved_groups);

    // LibTorch's own checks and messages.
    TORCH_CHECK(saved_groups.size() == optimizer.param_groups().size(),
                "loaded state dict has a different number of parameter groups");
    for (std::size_t i = 0; i < saved_groups.size(); ++i) {
      TORCH_CHECK(saved_groups[i].first.size() == optimizer.param_groups()[i].params().size(),
                  "loaded state dict contains a parameter group that has a different size than "
                  "the optimizer's parameter group");
    }
    for (std::size_t i = 0; i < saved_groups.size(); ++i) {
      const std::vector<at::Tensor>& params = optimizer.param_groups()[i].params();
      for (std::size_t j = 0; j < params.size(); ++j) {
        const auto it = saved_state.find(saved_groups[i].first[j]);
        if (it != saved_state.end()) optimizer.state()[state_key(params[j])] = std::move(it->second);
      }
      static_cast<Options&>(optimizer.param_groups()[i].options()) =
          static_cast<const Options&>(*saved_groups[i].second);
    }
  }
}

}  // namespace mixprec::optim::detail
