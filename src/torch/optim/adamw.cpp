// mixprec::optim::AdamW (include/mixprec/optim/adamw.h): LibTorch's AdamW options and state
// over the fused Adam step of adam.cpp with decoupled weight decay.
#include "mixprec/optim/adamw.h"

#include <ATen/ATen.h>
#include <torch/optim/serialize.h>

#include <memory>
#include <tuple>
#include <utility>

#include "mixprec/optim/adam.h"
#include "torch/optim/adapter.h"
#include "torch/optim/checkpoint.h"

namespace mixprec::optim {

AdamW::AdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
             torch::optim::AdamWOptions defaults)
    : torch::optim::Optimizer(std::move(param_groups),
                              std::make_unique<torch::optim::AdamWOptions>(defaults)) {
  detail::check_adam_options(defaults.lr(), defaults.eps(), std::get<0>(defaults.betas()),
                             std::get<1>(defaults.betas()), defaults.weight_decay());
}

AdamW::AdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults)
    : AdamW(std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(
                std::move(params))},
            defaults) {}

at::Tensor AdamW::step(LossClosure closure) {
  c10::NoGradGuard no_grad;
  at::Tensor loss = detail::run_closure(closure);
  detail::fused_adam_step<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(
      *this, *this, /*decoupled=*/true, "mixprec::optim::AdamW");
  return loss;
}

void AdamW::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(archive,
                                                                                     *this);
}

void AdamW::load(torch::serialize::InputArchive& archive) {
  // Note [Optimizer checkpoints across LibTorch versions] (checkpoint.h)
  detail::load_optimizer<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(archive,
                                                                                    *this);
}

}  // namespace mixprec::optim
