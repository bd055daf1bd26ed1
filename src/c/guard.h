// The C ABI's boundary (include/mixprec/c_api.h): every exported call runs its body in guarded(),
// which turns each C++ exception into a status code and this thread's last error, so none
// crosses into C. Shared by every file of src/c/; the handles of tensors and optimizers are in
// c/handles.h.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>
#include <utility>

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

/// Throws a Failure with MIXPREC_ERROR_INVALID_ARGUMENT and `message`.
[[noreturn]] inline void invalid(const std::string& message) {
  throw Failure{MIXPREC_ERROR_INVALID_ARGUMENT, message};
}

/// `*out` after checking `out` (MIXPREC_ERROR_NULL_ARGUMENT "<call>: <name> is NULL").
template <typename T>
T& out_arg(T* out, const char* call, const char* name = "out") {
  return *require(out, call, name);
}

}  // namespace mixprec::c_api
