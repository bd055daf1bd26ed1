// The C ABI's boundary (include/mixprec/c_api.h): every exported call runs its body in guarded(),
// which turns each C++ exception into a status code and this thread's last error, so none
// crosses into C. Shared by src/c/c_api.cpp and src/c/c_api_optim.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/c_api.h"

namespace mixprec::c_api {

/// A failure the C layer itself finds (a NULL handle, a bad struct_size): its status and message.
struct Failure {
  int status;
  std::string message;
};

/// Records `message` as this thread's last error and returns `status`. Never throws: if the
/// message cannot be stored, the last error says "out of memory".
int fail(int status, const char* message) noexcept;

/// Runs `body`; MIXPREC_OK if it returns, else the status of what it threw (a Failure as given,
/// c10::Error as MIXPREC_ERROR_RUNTIME with LibTorch's message without its backtrace, as Python
/// shows it, c10::OutOfMemoryError and std::bad_alloc as MIXPREC_ERROR_OUT_OF_MEMORY, anything
/// else as RUNTIME or UNKNOWN).
template <typename Body>
int guarded(Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return MIXPREC_OK;
  } catch (const Failure& f) {
    return fail(f.status, f.message.c_str());
  } catch (const c10::OutOfMemoryError& e) {  // a device allocation (CUDA's caching allocator)
    return fail(MIXPREC_ERROR_OUT_OF_MEMORY, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return fail(MIXPREC_ERROR_RUNTIME, e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return fail(MIXPREC_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(MIXPREC_ERROR_RUNTIME, e.what());
  } catch (...) {
    return fail(MIXPREC_ERROR_UNKNOWN, "an unknown C++ exception");
  }
}

/// `p`, or a Failure (MIXPREC_ERROR_NULL_ARGUMENT) "<call>: <name> is NULL".
template <typename T>
T* require(T* p, const char* call, const char* name) {
  if (p == nullptr) throw Failure{MIXPREC_ERROR_NULL_ARGUMENT, std::string(call) + ": " + name + " is NULL"};
  return p;
}

/// The tensor behind a binding's torch::Tensor* handle.
inline at::Tensor& tensor_arg(void* handle, const char* call, const char* name) {
  return *static_cast<at::Tensor*>(require(handle, call, name));
}

/// The tensors behind `n` handles (`handles` may be NULL only when n is 0); NULL entries are
/// refused when `allow_null_entries` is false and become undefined tensors otherwise.
std::vector<at::Tensor> tensor_list_arg(void* const* handles, std::size_t n, const char* call,
                                        const char* name, bool allow_null_entries);

/// A new heap torch::Tensor the caller owns (NULL for an undefined tensor).
inline void* new_tensor_handle(at::Tensor t) {
  return t.defined() ? new at::Tensor(std::move(t)) : nullptr;
}

/// The optimizer behind a torch::optim::Optimizer* (tch-rs) handle.
inline torch::optim::Optimizer& optimizer_arg(void* handle, const char* call) {
  return *static_cast<torch::optim::Optimizer*>(require(handle, call, "optimizer"));
}

/// The optimizer behind a std::shared_ptr<torch::optim::Optimizer>* (TorchSharp) handle.
inline torch::optim::Optimizer& shared_optimizer_arg(void* handle, const char* call) {
  auto& shared = *static_cast<std::shared_ptr<torch::optim::Optimizer>*>(
      require(handle, call, "shared_optimizer"));
  if (!shared) {
    throw Failure{MIXPREC_ERROR_NULL_ARGUMENT,
                  std::string(call) + ": shared_optimizer holds no optimizer (an empty shared_ptr)"};
  }
  return *shared;
}

}  // namespace mixprec::c_api
