// The C ABI of mixprec's fused optimizers (include/mixprec/c_api.h): mixprec::optim::SGD, Adam
// and AdamW over a binding's parameter handles, returned in both optimizer conventions; and any
// optimizer's learning rate and state, in both conventions.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c/guard.h"
#include "c/handles.h"
#include "c/streams.h"
#include "mixprec/c_api.h"
#include "mixprec/checkpoint.h"
#include "mixprec/optim.h"
#include "mixprec/serialize.h"
#include "torch/checkpoint/saving.h"
#include "torch/checkpoint/unpickle.h"

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

using OptimizerArg = torch::optim::Optimizer& (*)(void*, const char*);

int get_lr(OptimizerArg get, void* optimizer, double* out, const char* call) {
  return guarded([&] {
    torch::optim::Optimizer& opt = get(optimizer, call);
    double& result = out_arg(out, call);
    if (opt.param_groups().empty()) {
      throw Failure{MIXPREC_ERROR_RUNTIME, std::string(call) + ": the optimizer has no param group"};
    }
    result = opt.param_groups().front().options().get_lr();
  });
}

int set_lr(OptimizerArg get, void* optimizer, double lr, const char* call) {
  return guarded([&] {
    for (torch::optim::OptimizerParamGroup& group : get(optimizer, call).param_groups()) {
      group.options().set_lr(lr);
    }
  });
}

int state_dict(OptimizerArg get, void* optimizer, void** out_bytes, std::size_t* out_size,
               const char* call) {
  return guarded([&] {
    const torch::optim::Optimizer& opt = get(optimizer, call);
    void*& bytes_out = out_arg(out_bytes, call, "out_bytes");
    std::size_t& size_out = out_arg(out_size, call, "out_size");
    // Written straight into the caller's buffer as it is made: one copy of the bytes, not two.
    std::unique_ptr<char, decltype(&std::free)> buffer(nullptr, &std::free);
    std::size_t size = 0, capacity = 0;
    detail::write_untagged(optimizer_state_dict(opt), [&](const void* data, std::size_t n) {
      if (size + n > capacity) {
        capacity = std::max(size + n, 2 * capacity);
        void* grown = std::realloc(buffer.get(), capacity);
        if (grown == nullptr) throw std::bad_alloc();
        (void)buffer.release();
        buffer.reset(static_cast<char*>(grown));
      }
      std::memcpy(buffer.get() + size, data, n);
      size += n;
    });
    bytes_out = buffer.release();
    size_out = size;
  });
}

// Loads an optimizer from a checked source (mixprec's reader of untrusted bytes: unpickle.h).
void load_from_source(torch::optim::Optimizer& opt,
                      std::unique_ptr<detail::ByteSource> source, const char* call) {
  const c10::IValue value = detail::load_torch_save(std::move(source));
  if (!value.isGenericDict()) {
    throw Failure{MIXPREC_ERROR_RUNTIME,
                  std::string(call) + ": the bytes hold a " + value.tagKind() + ", not a state dict"};
  }
  load_optimizer_state_dict(opt, value.toGenericDict());
}

int load_state_dict(OptimizerArg get, void* optimizer, const void* data, std::size_t size,
                    const char* call) {
  return guarded([&] {
    torch::optim::Optimizer& opt = get(optimizer, call);
    // Read in place, not copied.
    load_from_source(opt, detail::memory_source(require(data, call, "data"), size), call);
  });
}

int save(OptimizerArg get, void* optimizer, const char* path, const char* call) {
  return guarded([&] {
    const torch::optim::Optimizer& opt = get(optimizer, call);
    detail::save_untagged(require(path, call, "path"), optimizer_state_dict(opt), call);
  });
}

int load(OptimizerArg get, void* optimizer, const char* path, const char* call) {
  return guarded([&] {
    torch::optim::Optimizer& opt = get(optimizer, call);
    load_from_source(opt, detail::file_source(require(path, call, "path")), call);
  });
}

int save_to(OptimizerArg get, void* optimizer, mixprec_write_fn write, void* context,
            const char* call) {
  return guarded([&] {
    const torch::optim::Optimizer& opt = get(optimizer, call);
    detail::write_untagged(optimizer_state_dict(opt), callback_sink(write, context, call));
  });
}

int load_from(OptimizerArg get, void* optimizer, mixprec_read_fn read, void* context,
              std::uint64_t size, const char* call) {
  return guarded([&] {
    torch::optim::Optimizer& opt = get(optimizer, call);
    load_from_source(opt, callback_source(read, context, size, call), call);
  });
}

}  // namespace
}  // namespace mixprec::c_api

using mixprec::c_api::optimizer_arg;
using mixprec::c_api::shared_optimizer_arg;

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

// ---- learning rate and state --------------------------------------------------------------------

int mixprec_optimizer_get_lr(void* optimizer, double* out) {
  return mixprec::c_api::get_lr(&optimizer_arg, optimizer, out, "mixprec_optimizer_get_lr");
}
int mixprec_optimizer_get_lr_shared(void* shared_optimizer, double* out) {
  return mixprec::c_api::get_lr(&shared_optimizer_arg, shared_optimizer, out,
                                "mixprec_optimizer_get_lr_shared");
}
int mixprec_optimizer_set_lr(void* optimizer, double lr) {
  return mixprec::c_api::set_lr(&optimizer_arg, optimizer, lr, "mixprec_optimizer_set_lr");
}
int mixprec_optimizer_set_lr_shared(void* shared_optimizer, double lr) {
  return mixprec::c_api::set_lr(&shared_optimizer_arg, shared_optimizer, lr,
                                "mixprec_optimizer_set_lr_shared");
}

int mixprec_optimizer_state_dict(void* optimizer, void** out_bytes, size_t* out_size) {
  return mixprec::c_api::state_dict(&optimizer_arg, optimizer, out_bytes, out_size,
                                    "mixprec_optimizer_state_dict");
}
int mixprec_optimizer_state_dict_shared(void* shared_optimizer, void** out_bytes,
                                        size_t* out_size) {
  return mixprec::c_api::state_dict(&shared_optimizer_arg, shared_optimizer, out_bytes, out_size,
                                    "mixprec_optimizer_state_dict_shared");
}
int mixprec_optimizer_load_state_dict(void* optimizer, const void* data, size_t size) {
  return mixprec::c_api::load_state_dict(&optimizer_arg, optimizer, data, size,
                                         "mixprec_optimizer_load_state_dict");
}
int mixprec_optimizer_load_state_dict_shared(void* shared_optimizer, const void* data,
                                             size_t size) {
  return mixprec::c_api::load_state_dict(&shared_optimizer_arg, shared_optimizer, data, size,
                                         "mixprec_optimizer_load_state_dict_shared");
}

int mixprec_optimizer_save(void* optimizer, const char* path) {
  return mixprec::c_api::save(&optimizer_arg, optimizer, path, "mixprec_optimizer_save");
}
int mixprec_optimizer_save_shared(void* shared_optimizer, const char* path) {
  return mixprec::c_api::save(&shared_optimizer_arg, shared_optimizer, path,
                              "mixprec_optimizer_save_shared");
}
int mixprec_optimizer_load(void* optimizer, const char* path) {
  return mixprec::c_api::load(&optimizer_arg, optimizer, path, "mixprec_optimizer_load");
}
int mixprec_optimizer_load_shared(void* shared_optimizer, const char* path) {
  return mixprec::c_api::load(&shared_optimizer_arg, shared_optimizer, path,
                              "mixprec_optimizer_load_shared");
}
int mixprec_optimizer_save_to(void* optimizer, mixprec_write_fn write, void* context) {
  return mixprec::c_api::save_to(&optimizer_arg, optimizer, write, context,
                                 "mixprec_optimizer_save_to");
}
int mixprec_optimizer_save_to_shared(void* shared_optimizer, mixprec_write_fn write,
                                     void* context) {
  return mixprec::c_api::save_to(&shared_optimizer_arg, shared_optimizer, write, context,
                                 "mixprec_optimizer_save_to_shared");
}
int mixprec_optimizer_load_from(void* optimizer, mixprec_read_fn read, void* context,
                                uint64_t size) {
  return mixprec::c_api::load_from(&optimizer_arg, optimizer, read, context, size,
                                   "mixprec_optimizer_load_from");
}
int mixprec_optimizer_load_from_shared(void* shared_optimizer, mixprec_read_fn read,
                                       void* context, uint64_t size) {
  return mixprec::c_api::load_from(&shared_optimizer_arg, shared_optimizer, read, context, size,
                                   "mixprec_optimizer_load_from_shared");
}

void mixprec_bytes_free(void* bytes) { std::free(bytes); }

}  // extern "C"
