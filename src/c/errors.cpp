// The C ABI's error channel (include/mixprec/c_api.h): this thread's last error, UTF-8.
#include <string>

#include "c/guard.h"
#include "mixprec/c_api.h"

namespace mixprec::c_api {
namespace {
thread_local std::string last_error;
thread_local bool last_error_lost = false;  // the message could not be stored
}  // namespace

int fail(int status, const char* message) noexcept {
  try {
    last_error = message;
    last_error_lost = false;
  } catch (...) {
    last_error_lost = true;
  }
  return status;
}

}  // namespace mixprec::c_api

extern "C" const char* mixprec_last_error(void) {
  if (mixprec::c_api::last_error_lost) return "out of memory";
  return mixprec::c_api::last_error.c_str();
}
