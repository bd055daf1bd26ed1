// c10::Error's message without LibTorch's backtrace, for tests that compare messages.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

/// For mixprec::test::message_of (tests/message_of.h): c10::Error's message without LibTorch's
/// backtrace (the text the C ABI reports and Python's messages carry), what() of any other
/// exception.
struct WithoutBacktrace {
  std::string operator()(const std::exception& e) const {
    if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
      return c10_error->what_without_backtrace();
    }
    return e.what();
  }
};
