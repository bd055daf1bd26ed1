// Captures LibTorch's warnings (TORCH_WARN), for the tests that check their text: the errors walk
// (errors_walk_test.cpp) and python.messages (tests/python/messages.cpp).
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "mixprec/torch_version.h"

namespace mixprec::test {

// LibTorch 2.0 made c10::Warning a class (1.13: a namespace) and moved the handler functions to
// c10::WarningUtils.
#if MIXPREC_TORCH_2
namespace warning_utils = c10::WarningUtils;
#else
namespace warning_utils = c10::Warning;
#endif

/// Appends every warning's message to `text`. Install it with warning_utils::WarningHandlerGuard,
/// and add a warning_utils::WarnAlways to see TORCH_WARN_ONCE warnings more than once.
struct WarningCapture : c10::WarningHandler {
#if MIXPREC_TORCH_2
  void process(const c10::Warning& w) override { text += w.msg(); }
#else
  void process(const c10::SourceLocation&, const std::string& msg, const bool) override {
    text += msg;
  }
#endif
  std::string text;
};

}  // namespace mixprec::test
