// The stand-in binding layer of examples/c_api (mini_binding.h): one try/catch wrapper per call
// around LibTorch, as tch-rs's torch_api.cpp (PROTECT) and TorchSharp's THS*.cpp (CATCH) are.
#include "mini_binding.h"

#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {

thread_local char* last_err = nullptr;

// Runs `body`; on an exception, stores its message and returns a value-initialised result
// (NULL, 0, or nothing), as tch-rs's PROTECT does.
template <typename Body>
auto protect(Body&& body) noexcept -> decltype(body()) {
  try {
    return std::forward<Body>(body)();
  } catch (const std::exception& e) {
    std::free(last_err);
    last_err = strdup(e.what());
  }
  return decltype(body())();
}

at::Tensor& tensor(mb_tensor t) {
  if (t == nullptr) throw std::invalid_argument("mini_binding: a NULL tensor");
  return *static_cast<at::Tensor*>(t);
}

torch::optim::Optimizer& optimizer(mb_optimizer o) {
  if (o == nullptr) throw std::invalid_argument("mini_binding: a NULL optimizer");
  return *static_cast<torch::optim::Optimizer*>(o);
}

mb_tensor handle(at::Tensor t) { return new at::Tensor(std::move(t)); }

}  // namespace

extern "C" {

char* mb_get_and_reset_last_err(void) { return std::exchange(last_err, nullptr); }

void mb_manual_seed(int64_t seed) {
  protect([&] { torch::manual_seed(static_cast<uint64_t>(seed)); });
}

mb_tensor mb_randn(int64_t rows, int64_t cols) {
  return protect([&] { return handle(torch::randn({rows, cols})); });
}

mb_tensor mb_zeros(int64_t rows, int64_t cols, int requires_grad) {
  return protect([&] {
    return handle(torch::zeros({rows, cols}, torch::requires_grad(requires_grad != 0)));
  });
}

mb_tensor mb_from_floats(const float* values, int64_t rows, int64_t cols) {
  return protect([&] {
    if (values == nullptr) throw std::invalid_argument("mb_from_floats: values is NULL");
    return handle(torch::from_blob(const_cast<float*>(values), {rows, cols}).clone());
  });
}

mb_tensor mb_matmul(mb_tensor a, mb_tensor b) {
  return protect([&] { return handle(tensor(a).matmul(tensor(b))); });
}

mb_tensor mb_add(mb_tensor a, mb_tensor b) {
  return protect([&] { return handle(tensor(a) + tensor(b)); });
}

mb_tensor mb_mse_loss(mb_tensor input, mb_tensor target) {
  return protect([&] { return handle(torch::mse_loss(tensor(input), tensor(target))); });
}

mb_tensor mb_clone(mb_tensor t) {
  return protect([&] { return handle(tensor(t).detach().clone()); });
}

void mb_backward(mb_tensor t) {
  protect([&] { tensor(t).backward(); });
}

mb_tensor mb_grad(mb_tensor t) {
  return protect([&]() -> mb_tensor {
    const at::Tensor& g = tensor(t).grad();
    return g.defined() ? handle(g) : nullptr;
  });
}

double mb_item(mb_tensor t) {
  double v = std::numeric_limits<double>::quiet_NaN();
  protect([&] { v = tensor(t).item<double>(); });
  return v;
}

int mb_equal(mb_tensor a, mb_tensor b) {
  return protect([&] { return torch::equal(tensor(a), tensor(b)) ? 1 : 0; });
}

void mb_mul_scalar_(mb_tensor t, double v) {
  protect([&] {
    torch::NoGradGuard no_grad;
    tensor(t).mul_(v);
  });
}

void mb_sub_scaled_(mb_tensor param, mb_tensor grad, double alpha) {
  protect([&] {
    torch::NoGradGuard no_grad;
    tensor(param).sub_(tensor(grad), alpha);
  });
}

void mb_zero_grad_of(mb_tensor t) {
  protect([&] {
    at::Tensor& g = tensor(t).mutable_grad();
    if (g.defined()) g.zero_();
  });
}

void mb_free(mb_tensor t) { delete static_cast<at::Tensor*>(t); }

mb_optimizer mb_sgd_create(const mb_tensor* params, int n, double lr) {
  return protect([&]() -> mb_optimizer {
    std::vector<at::Tensor> list;
    for (int i = 0; i < n; ++i) list.push_back(tensor(params[i]));
    torch::optim::Optimizer* o = new torch::optim::SGD(list, torch::optim::SGDOptions(lr));
    return o;  // the base class pointer: what mixprec's C ABI casts the handle back to
  });
}

void mb_zero_grad(mb_optimizer o) {
  protect([&] { optimizer(o).zero_grad(); });
}

void mb_step(mb_optimizer o) {
  protect([&] { optimizer(o).step(); });
}

void mb_optimizer_free(mb_optimizer o) { delete static_cast<torch::optim::Optimizer*>(o); }

}  // extern "C"
