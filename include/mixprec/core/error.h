// Error reporting of the framework-free core: user errors throw mixprec::core::Error with a
// message built only on failure; broken invariants throw through MIXPREC_INTERNAL_ASSERT.
// Library code never aborts or exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mixprec::core {

/// The exception every user error of the core throws. Derives from std::runtime_error, so
/// `catch (const std::exception&)` sees it, and what() holds the whole message.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <typename... Args>
[[noreturn]] void throw_error(const char* file, int line, Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  out << " (" << file << ":" << line << ")";
  throw Error(out.str());
}

}  // namespace detail
}  // namespace mixprec::core

/// Throws mixprec::core::Error when `cond` is false; the remaining arguments are streamed into
/// the message only then. Use for errors a user can cause: say who, which rule, what was seen.
#define MIXPREC_CHECK(cond, ...)                                             \
  do {                                                                       \
    if (!(cond)) {                                                           \
      ::mixprec::core::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__); \
    }                                                                        \
  } while (false)

/// Checks an invariant of mixprec itself; failing it is a mixprec bug, reported as an Error.
#define MIXPREC_INTERNAL_ASSERT(cond)                                                     \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      ::mixprec::core::detail::throw_error(__FILE__, __LINE__,                            \
                                           "mixprec internal assert failed: " #cond       \
                                           ". Please report this as a bug of mixprec."); \
    }                                                                                     \
  } while (false)
