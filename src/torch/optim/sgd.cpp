// mixprec::optim::SGD (include/mixprec/optim/sgd.h): walk the param groups device by device,
// find or create the momentum buffers, hand views to core::fused_sgd_, and keep new CPU buffers
// only when the kernel applied the update.
#include "mixprec/optim/sgd.h"

#include <ATen/ATen.h>
#include <torch/optim/serialize.h>

#include <memory>
#include <string>
#include <utility>

#include "mixprec/core/optim_kernels.h"
#include "torch/optim/adapter.h"
#include "torch/optim/checkpoint.h"

namespace mixprec::optim {

SGD::SGD(std::vector<torch::optim::OptimizerParamGroup> param_groups,
         torch::optim::SGDOptions defaults)
    : torch::optim::Optimizer(std::move(param_groups),
                              std::make_unique<torch::optim::SGDOptions>(defaults)) {
  TORCH_CHECK(defaults.lr() >= 0, "Invalid learning rate: ", defaults.lr());
  TORCH_CHECK(defaults.momentum() >= 0, "Invalid momentum value: ", defaults.momentum());
  TORCH_CHECK(defaults.weight_decay() >= 0,
              "Invalid weight_decay value: ", defaults.weight_decay());
  TORCH_CHECK(!defaults.nesterov() || (defaults.momentum() > 0 && defaults.dampening() == 0),
              "Nesterov momentum requires a momentum and zero dampening");
}

SGD::SGD(std::vector<at::Tensor> params, torch::optim::SGDOptions defaults)
    : SGD(std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(
              std::move(params))},
          defaults) {}

at::Tensor SGD::step(LossClosure closure) {
  constexpr const char* kWho = "mixprec::optim::SGD";
  c10::NoGradGuard no_grad;
  at::Tensor loss = detail::run_closure(closure);
  detail::AmpScalars scalars(*this, kWho);
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    core::SgdHyper hyper;
    hyper.lr = options.lr();
    hyper.momentum = options.momentum();
    hyper.dampening = options.dampening();
    hyper.weight_decay = options.weight_decay();
    hyper.nesterov = options.nesterov();

    for (const auto& batch : detail::by_device(group.params())) {
      const c10::Device device = batch.first;  // a variable, so the lambdas can capture it
      const std::vector<at::Tensor>& params = batch.second;
      const bool cuda = device.is_cuda();
      std::vector<core::SgdTensors> tensors;
      std::vector<std::pair<detail::StateKey, std::unique_ptr<torch::optim::SGDParamState>>>
          created;
      detail::ElementwiseViews views;
      for (const at::Tensor& p : params) {
        const at::Tensor& grad = p.grad();
        TORCH_CHECK(!grad.is_sparse(), kWho, " does not support sparse gradients");
        core::SgdTensors t;
        std::vector<at::Tensor> list{p, grad};
        if (hyper.momentum != 0.0) {
          const auto key = detail::state_key(p);
          if (cuda) {
            // Note [Step counts of CUDA parameters] (adapter.h). The buffer starts at zero, so
            // a state saved before its first applied step holds no garbage.
            auto& state = detail::device_state<torch::optim::SGDParamState>(state_, key, p, [&] {
              torch::optim::SGDParamState fresh;
              fresh.momentum_buffer(at::zeros_like(p, at::MemoryFormat::Preserve));
              return fresh;
            });
            list.push_back(state.momentum_buffer());
            t.step_count = state.count();
          } else if (auto* state = detail::host_state<torch::optim::SGDParamState>(state_, key)) {
            list.push_back(state->momentum_buffer());
          } else {
            // The kernel fills the new buffer with the first gradient (LibTorch clones it); the
            // buffer is kept only if the step is applied.
            auto fresh = std::make_unique<torch::optim::SGDParamState>();
            fresh->momentum_buffer(at::empty_like(p, at::MemoryFormat::Preserve));
            list.push_back(fresh->momentum_buffer());
            t.first_step = true;
            created.emplace_back(key, std::move(fresh));
          }
        }
        const std::vector<core::TensorView> v = views.add(list, kWho);
        t.param = v[0];
        t.grad = v[1];
        if (hyper.momentum != 0.0) t.momentum_buffer = v[2];
        tensors.push_back(t);
      }
      const bool applied = detail::call_kernel(kWho, device, [&](void* stream) {
        return core::fused_sgd_(tensors.data(), tensors.size(), hyper, scalars.grad_scale(device),
                                scalars.found_inf(device), stream, scalars.clip_coef(device));
      });
      views.bump_versions();
      // CUDA: the device decided, and a skipped step wrote nothing, so copying back is exact.
      if (cuda) {
        views.write_back();
        continue;
      }
      if (!applied) continue;  // found_inf: nothing was written; drop the buffers made above
      views.write_back();
      for (auto& [key, fresh] : created) state_[key] = std::move(fresh);
    }
  }
  return loss;
}

void SGD::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<torch::optim::SGDParamState, torch::optim::SGDOptions>(archive, *this);
}

void SGD::load(torch::serialize::InputArchive& archive) {
  // Note [Optimizer checkpoints across LibTorch versions] (checkpoint.h)
  detail::load_optimizer<torch::optim::SGDParamState, torch::optim::SGDOptions>(archive, *this);
}

}  // namespace mixprec::optim
