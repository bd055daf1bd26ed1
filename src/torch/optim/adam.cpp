// mixprec::optim::Adam (include/mixprec/optim/adam.h) and the fused step it shares with AdamW:
// walk the param groups device by device, find or create each parameter's state, hand views to
// core::fused_adam_, and advance the step counts only when the update was applied (on CUDA the
// kernels do that on the device).
#include "mixprec/optim/adam.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/serialize.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "mixprec/core/optim_kernels.h"
#include "torch/optim/adapter.h"
#include "torch/optim/checkpoint.h"

namespace mixprec::optim {
namespace detail {

void check_adam_options(double lr, double eps, double beta1, double beta2, double weight_decay) {
  TORCH_CHECK(lr >= 0, "Invalid learning rate: ", lr);
  TORCH_CHECK(eps >= 0, "Invalid epsilon value: ", eps);
  TORCH_CHECK(0 <= beta1 && beta1 < 1.0, "Invalid beta parameter at index 0: ", beta1);
  TORCH_CHECK(0 <= beta2 && beta2 < 1.0, "Invalid beta parameter at index 1: ", beta2);
  TORCH_CHECK(weight_decay >= 0, "Invalid weight_decay value: ", weight_decay);
}

template <typename ParamState, typename Options>
void fused_adam_step(torch::optim::Optimizer& optimizer, const SupportsAmpScaling& amp,
                     bool decoupled, const char* who) {
  AmpScalars scalars(amp, who);
  auto& all_state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    core::AdamHyper hyper;
    hyper.lr = options.lr();
    hyper.beta1 = std::get<0>(options.betas());
    hyper.beta2 = std::get<1>(options.betas());
    hyper.eps = options.eps();
    hyper.weight_decay = options.weight_decay();
    hyper.amsgrad = options.amsgrad();
    hyper.decoupled_weight_decay = decoupled;

    for (const auto& batch : by_device(group.params())) {
      const c10::Device device = batch.first;  // a variable, so the lambdas can capture it
      const std::vector<at::Tensor>& params = batch.second;
      const bool cuda = device.is_cuda();
      std::vector<core::AdamTensors> tensors;
      std::vector<ParamState*> states;  // parallel to tensors
      std::vector<std::pair<detail::StateKey, std::unique_ptr<ParamState>>> created;
      ElementwiseViews views;
      for (const at::Tensor& p : params) {
        const at::Tensor& grad = p.grad();
        TORCH_CHECK(!grad.is_sparse(), who, " does not support sparse gradients");
        const auto key = state_key(p);
        const auto fresh_state = [&] {
          ParamState fresh;
          fresh.step(0);
          fresh.exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
          fresh.exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
          if (hyper.amsgrad) fresh.max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
          return fresh;
        };
        core::AdamTensors t;
        ParamState* state = nullptr;
        if (cuda) {  // Note [Step counts of CUDA parameters] (adapter.h)
          auto& on_gpu = device_state<ParamState>(all_state, key, p, fresh_state);
          t.step_count = on_gpu.count();
          state = &on_gpu;
        } else if ((state = host_state<ParamState>(all_state, key)) == nullptr) {
          // Kept only if the step is applied: a skipped first step leaves no state, as with
          // GradScaler and torch::optim::Adam, which is not called at all then.
          created.emplace_back(key, std::make_unique<ParamState>(fresh_state()));
          state = created.back().second.get();
        }
        // amsgrad switched on after the state was made: start its maximum from zero.
        if (hyper.amsgrad && !state->max_exp_avg_sq().defined()) {
          state->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        }
        std::vector<at::Tensor> list{p, grad, state->exp_avg(), state->exp_avg_sq()};
        if (hyper.amsgrad) list.push_back(state->max_exp_avg_sq());
        const std::vector<core::TensorView> v = views.add(list, who);
        t.param = v[0];
        t.grad = v[1];
        t.exp_avg = v[2];
        t.exp_avg_sq = v[3];
        if (hyper.amsgrad) t.max_exp_avg_sq = v[4];
        t.step = state->step() + 1;
        tensors.push_back(t);
        states.push_back(state);
      }
      const bool applied = call_kernel(who, device, [&](void* stream) {
        return core::fused_adam_(tensors.data(), tensors.size(), hyper, scalars.grad_scale(device),
                                 scalars.found_inf(device), stream, scalars.clip_coef(device));
      });
      views.bump_versions();
      // CUDA: the device decided, and a skipped step wrote nothing, so copying back is exact.
      if (cuda) {
        views.write_back();
        continue;
      }
      if (!applied) continue;  // found_inf: nothing was written; drop the state made above
      views.write_back();
      for (ParamState* state : states) state->step(state->step() + 1);
      for (auto& [key, fresh] : created) all_state[key] = std::move(fresh);
    }
  }
}

template void fused_adam_step<torch::optim::AdamParamState, torch::optim::AdamOptions>(
    torch::optim::Optimizer&, const SupportsAmpScaling&, bool, const char*);
template void fused_adam_step<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(
    torch::optim::Optimizer&, const SupportsAmpScaling&, bool, const char*);

}  // namespace detail

Adam::Adam(std::vector<torch::optim::OptimizerParamGroup> param_groups,
           torch::optim::AdamOptions defaults)
    : torch::optim::Optimizer(std::move(param_groups),
                              std::make_unique<torch::optim::AdamOptions>(defaults)) {
  detail::check_adam_options(defaults.lr(), defaults.eps(), std::get<0>(defaults.betas()),
                             std::get<1>(defaults.betas()), defaults.weight_decay());
}

Adam::Adam(std::vector<at::Tensor> params, torch::optim::AdamOptions defaults)
    : Adam(std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(
               std::move(params))},
           defaults) {}

at::Tensor Adam::step(LossClosure closure) {
  c10::NoGradGuard no_grad;
  at::Tensor loss = detail::run_closure(closure);
  detail::fused_adam_step<torch::optim::AdamParamState, torch::optim::AdamOptions>(
      *this, *this, /*decoupled=*/false, "mixprec::optim::Adam");
  return loss;
}

void Adam::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<torch::optim::AdamParamState, torch::optim::AdamOptions>(archive, *this);
}

void Adam::load(torch::serialize::InputArchive& archive) {
  // Note [Optimizer checkpoints across LibTorch versions] (checkpoint.h)
  detail::load_optimizer<torch::optim::AdamParamState, torch::optim::AdamOptions>(archive, *this);
}

}  // namespace mixprec::optim
