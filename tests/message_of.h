// The one helper for tests of code that must fail: the message of what it throws.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <optional>
#include <string>
#include <utility>

namespace mixprec::test {

/// Reads an exception's message: what(). The LibTorch tests pass WithoutBacktrace
/// (tests/torch/without_backtrace.h) for c10::Error's text without LibTorch's backtrace.
struct What {
  std::string operator()(const std::exception& e) const { return e.what(); }
};

/// Calls `f`: the message of the std::exception it throws, read by `text`, or std::nullopt when
/// it returns.
template <typename F, typename Text = What>
std::optional<std::string> message_of(F&& f, Text text = {}) {
  try {
    std::forward<F>(f)();
  } catch (const std::exception& e) {
    return text(e);
  }
  return std::nullopt;
}

}  // namespace mixprec::test

/// Runs `stmt` and checks that it throws a std::exception whose message contains `text`.
#define EXPECT_THROW_WITH(stmt, text)                                                        \
  do {                                                                                       \
    const auto mixprec_message_ = ::mixprec::test::message_of([&] { stmt; });                \
    if (!mixprec_message_) {                                                                 \
      ADD_FAILURE() << #stmt << " threw nothing; expected a message containing: " << (text); \
    } else {                                                                                 \
      EXPECT_NE(mixprec_message_->find(text), std::string::npos)                             \
          << #stmt << " threw: " << *mixprec_message_;                                       \
    }                                                                                        \
  } while (false)
