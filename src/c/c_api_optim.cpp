// The C ABI of mixprec's fused optimizers (include/mixprec/c_api.h): mixprec::optim::SGD, Adam
// and AdamW over a binding's parameter handles, returned in both optimizer conventions.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <utility>
#include <vector>

#include "c/guard.h"
#include "mixprec/c_api.h"
#include "mixprec/optim.h"

namespace mixprec::c_api {
namespace {

// Makes the optimizer with `make(params)` and hands it over as a torch::optim::Optimizer*
// (shared false) or a std::shared_ptr<torch::optim::Optimizer>* (shared true).
template <typename Make>
int create(void* const* params, std::size_t n, bool shared, void** out, const char* call,
           Make make) {
  return guarded([&] {
    std::vector<at::Tensor> list = tensor_list_arg(params, n, call, "params",
                                                   /*allow_null_entries=*/false);
    void*& result = *require(out, call, shared ? "out_shared_optimizer" : "out_optimizer");
    std::unique_ptr<torch::optim::Optimizer> optimizer = make(std::move(list));
    if (shared) {
      result = new std::shared_ptr<torch::optim::Optimizer>(std::move(optimizer));
    } else {
      result = optimizer.release();
    }
  });
}

auto sgd(double lr, double momentum, double dampening, double weight_decay, int nesterov) {
  return [=](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(params), torch::optim::SGDOptions(lr)
                                                               .momentum(momentum)
                                                               .dampening(dampening)
                                                               .weight_decay(weight_decay)
                                                               .nesterov(nesterov != 0));
  };
}

template <typename Optimizer, typename Options>
auto adam(double lr, double beta1, double beta2, double eps, double weight_decay, int amsgrad) {
  return [=](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<Optimizer>(std::move(params), Options(lr)
                                                              .betas({beta1, beta2})
                                                              .eps(eps)
                                                              .weight_decay(weight_decay)
                                                              .amsgrad(amsgrad != 0));
  };
}

}  // namespace
}  // namespace mixprec::c_api


extern "C" {

int mixprec_optim_sgd_create(void* const* params, size_t n, double lr, double momentum,
                             double dampening, double weight_decay, int nesterov,
                             void** out_optimizer) {
  return mixprec::c_api::create(params, n, /*shared=*/false, out_optimizer,
                                "mixprec_optim_sgd_create",
                                mixprec::c_api::sgd(lr, momentum, dampening, weight_decay, nesterov));
}

int mixprec_optim_sgd_create_shared(void* const* params, size_t n, double lr, double momentum,
                                    double dampening, double weight_decay, int nesterov,
                                    void** out_shared_optimizer) {
  return mixprec::c_api::create(params, n, /*shared=*/true, out_shared_optimizer,
                                "mixprec_optim_sgd_create_shared",
                                mixprec::c_api::sgd(lr, momentum, dampening, weight_decay, nesterov));
}

int mixprec_optim_adam_create(void* const* params, size_t n, double lr, double beta1, double beta2,
                              double eps, double weight_decay, int amsgrad, void** out_optimizer) {
  return mixprec::c_api::create(
      params, n, /*shared=*/false, out_optimizer, "mixprec_optim_adam_create",
      mixprec::c_api::adam<mixprec::optim::Adam, torch::optim::AdamOptions>(
          lr, beta1, beta2, eps, weight_decay, amsgrad));
}

int mixprec_optim_adam_create_shared(void* const* params, size_t n, double lr, double beta1,
                                     double beta2, double eps, double weight_decay, int amsgrad,
                                     void** out_shared_optimizer) {
  return mixprec::c_api::create(
      params, n, /*shared=*/true, out_shared_optimizer, "mixprec_optim_adam_create_shared",
      mixprec::c_api::adam<mixprec::optim::Adam, torch::optim::AdamOptions>(
          lr, beta1, beta2, eps, weight_decay, amsgrad));
}

int mixprec_optim_adamw_create(void* const* params, size_t n, double lr, double beta1,
                               double beta2, double eps, double weight_decay, int amsgrad,
                               void** out_optimizer) {
  return mixprec::c_api::create(
      params, n, /*shared=*/false, out_optimizer, "mixprec_optim_adamw_create",
      mixprec::c_api::adam<mixprec::optim::AdamW, torch::optim::AdamWOptions>(
          lr, beta1, beta2, eps, weight_decay, amsgrad));
}

int mixprec_optim_adamw_create_shared(void* const* params, size_t n, double lr, double beta1,
                                      double beta2, double eps, double weight_decay, int amsgrad,
                                      void** out_shared_optimizer) {
  return mixprec::c_api::create(
      params, n, /*shared=*/true, out_shared_optimizer, "mixprec_optim_adamw_create_shared",
      mixprec::c_api::adam<mixprec::optim::AdamW, torch::optim::AdamWOptions>(
          lr, beta1, beta2, eps, weight_decay, amsgrad));
}

void mixprec_optimizer_free(void* optimizer) {
  delete static_cast<torch::optim::Optimizer*>(optimizer);
}

void mixprec_optimizer_free_shared(void* shared_optimizer) {
  delete static_cast<std::shared_ptr<torch::optim::Optimizer>*>(shared_optimizer);
}

}  // extern "C"
