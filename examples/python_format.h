// Python-style formatting for the examples, so that C++ prints what `print(f"...")` prints:
// python_float_repr(65536.0) == "65536.0" (repr/str of a float) and python_bool(false) == "False".
// Header-only; used by examples/seed_example_*.cpp.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mixprec_examples {

/// Python's `repr(x)` for a float (also what str() and an f-string `{x}` give): the shortest
/// digit string that reads back as `x`, in fixed notation when the decimal exponent is in
/// [-4, 16) ("65536.0", "0.1", "0.0001", "1000000000000000.0"), otherwise in scientific notation
/// with a signed exponent of at least two digits ("1e+16", "1.5e-05"); "inf", "-inf", "nan".
inline std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0.0) return std::signbit(x) ? "-0.0" : "0.0";

  // Shortest round-trip: the fewest significant digits (1..17) whose %e reads back exactly.
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }

  // buf is "[-]d[.ddd]e[+-]XX": split into sign, digits (no dot, no trailing zeros), exponent.
  std::string s(buf);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const std::size_t e_pos = s.find('e');
  const int exponent = std::atoi(s.c_str() + e_pos + 1);
  std::string digits;
  for (std::size_t i = 0; i < e_pos; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();

  // CPython's float_repr_style 'r': decpt is where the decimal point goes relative to digits.
  const int decpt = exponent + 1;
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
    } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
      out = digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<std::size_t>(decpt)) + "." +
            digits.substr(static_cast<std::size_t>(decpt));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  exponent < 0 ? -exponent : exponent);
    out += exp_buf;
  }
  return sign + out;
}

/// Python's `str(b)` for a bool: "True" or "False".
inline std::string python_bool(bool b) { return b ? "True" : "False"; }

}  // namespace mixprec_examples
