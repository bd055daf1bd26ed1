// Pickle opcodes for the structure-aware mutator (torch_save_mutator.h): a pickle split into its
// opcodes and put back byte for byte, encoders of the values torch.save writes, and a rough
// simulation that finds the storages a pickle names (persistent ids) and the opcode of each count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::fuzz {

inline std::uint64_t little_at(std::string_view p, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[at + i]);
  return v;
}
inline std::string little_bytes(std::uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

/// Bytes of the opcode at `pos` with its arguments (every opcode of protocols 0 to 5); 0 when
/// the pickle ends inside them.
inline std::size_t op_length(std::string_view p, std::size_t pos) {
  const std::size_t rest = p.size() - pos - 1;
  auto fixed = [&](std::size_t n) -> std::size_t { return n <= rest ? 1 + n : 0; };
  auto counted = [&](int width) -> std::size_t {
    if (rest < static_cast<std::size_t>(width)) return 0;
    const std::uint64_t n = little_at(p, pos + 1, width);
    return n <= rest - static_cast<std::size_t>(width) ? 1 + width + n : 0;
  };
  auto lines = [&](int count) -> std::size_t {
    std::size_t at = pos + 1;
    for (int i = 0; i < count; ++i) {
      const std::size_t nl = p.find('\n', at);
      if (nl == std::string_view::npos) return 0;
      at = nl + 1;
    }
    return at - pos;
  };
  switch (static_cast<unsigned char>(p[pos])) {
    case 0x80: case 'K': case 'q': case 'h': case 0x82: return fixed(1);
    case 'M': case 0x83: return fixed(2);
    case 'J': case 'r': case 'j': case 0x84: return fixed(4);
    case 'G': case 0x95: return fixed(8);
    case 0x8a: case 0x8c: case 'C': case 'U': return counted(1);
    case 0x8b: case 'X': case 'B': case 'T': return counted(4);
    case 0x8d: case 0x8e: case 0x96: return counted(8);
    case 'c': case 'i': return lines(2);
    case 'I': case 'L': case 'F': case 'S': case 'V': case 'p': case 'g': case 'P': return lines(1);
    default: return 1;
  }
}

/// The opcodes of a pickle; a truncated last one is kept whole, so join(split(p)) == p.
inline std::vector<std::string> split(std::string_view p) {
  std::vector<std::string> ops;
  std::size_t pos = 0;
  while (pos < p.size()) {
    std::size_t n = op_length(p, pos);
    if (n == 0) n = p.size() - pos;
    ops.emplace_back(p.substr(pos, n));
    pos += n;
  }
  return ops;
}
inline std::string join(const std::vector<std::string>& ops) {
  std::string out;
  for (const auto& op : ops) out += op;
  return out;
}

inline unsigned char code(const std::string& op) { return static_cast<unsigned char>(op[0]); }

// ---- values -------------------------------------------------------------------------------------

/// An int as the smallest opcode Python's pickler would use (LONG1 of 8 bytes past int32).
inline std::string int_op(std::int64_t v) {
  if (v >= 0 && v < 256) return "K" + little_bytes(static_cast<std::uint64_t>(v), 1);
  if (v >= 0 && v < 65536) return "M" + little_bytes(static_cast<std::uint64_t>(v), 2);
  if (v >= INT32_MIN && v <= INT32_MAX) return "J" + little_bytes(static_cast<std::uint64_t>(v), 4);
  return std::string("\x8a\x08", 2) + little_bytes(static_cast<std::uint64_t>(v), 8);
}
/// A memo PUT or GET of `index` (BINPUT/BINGET, or the LONG_ forms past 255).
inline std::string memo_op(bool put, std::uint64_t index) {
  if (index < 256) return std::string(1, put ? 'q' : 'h') + little_bytes(index, 1);
  return std::string(1, put ? 'r' : 'j') + little_bytes(index, 4);
}
inline std::string str_op(std::string_view s) {
  return "X" + little_bytes(s.size(), 4) + std::string(s);
}
inline std::string float_op(double d) {
  std::uint64_t bits = 0;
  static_assert(sizeof bits == sizeof d, "double is 64 bits");
  __builtin_memcpy(&bits, &d, 8);
  std::string out = "G";
  for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xff);  // big-endian
  return out;
}
inline std::string global_op(std::string_view module, std::string_view name) {
  return "c" + std::string(module) + "\n" + std::string(name) + "\n";
}

/// The int an opcode holds (ints, memo indices), if it holds one.
inline std::optional<std::int64_t> int_of(const std::string& op) {
  const std::size_t n = op.size();
  switch (code(op)) {
    case 'K': case 'q': case 'h':
      if (n != 2) return std::nullopt;
      return static_cast<std::int64_t>(little_at(op, 1, 1));
    case 'M': if (n != 3) return std::nullopt; return static_cast<std::int64_t>(little_at(op, 1, 2));
    case 'J': if (n != 5) return std::nullopt; return static_cast<std::int32_t>(little_at(op, 1, 4));
    case 'r': case 'j':
      if (n != 5) return std::nullopt;
      return static_cast<std::int64_t>(little_at(op, 1, 4));
    case 0x8a: {
      if (op.size() < 2) return std::nullopt;
      const std::size_t n = static_cast<unsigned char>(op[1]);
      if (n == 0 || n > 8 || op.size() != 2 + n) return std::nullopt;
      std::uint64_t v = little_at(op, 2, static_cast<int>(n));
      if (n < 8 && (static_cast<unsigned char>(op[1 + n]) & 0x80) != 0) v |= ~std::uint64_t{0} << (8 * n);
      return static_cast<std::int64_t>(v);
    }
    default: return std::nullopt;
  }
}
inline bool is_memo(const std::string& op) {
  const unsigned char c = code(op);
  return c == 'q' || c == 'h' || c == 'r' || c == 'j';
}
/// The str of a BINUNICODE, SHORT_BINUNICODE or BINUNICODE8.
inline std::optional<std::string> str_of(const std::string& op) {
  switch (code(op)) {
    case 'X': return op.size() >= 5 ? std::optional<std::string>(op.substr(5)) : std::nullopt;
    case 0x8c: return op.size() >= 2 ? std::optional<std::string>(op.substr(2)) : std::nullopt;
    case 0x8d: return op.size() >= 9 ? std::optional<std::string>(op.substr(9)) : std::nullopt;
    default: return std::nullopt;
  }
}

/// Opcodes that push one value and pop none: a value of any kind can take their place.
inline bool is_leaf(const std::string& op) {
  switch (code(op)) {
    case 'N': case 0x88: case 0x89: case 'K': case 'M': case 'J': case 0x8a: case 'G': case 'X':
    case 0x8c: case 0x8d: case ')': case 'h': case 'j':
      return true;
    default:
      return false;
  }
}

/// The memo's size before opcode `end`, as the picklers number it (PUTs in order, MEMOIZE next).
inline std::uint64_t memo_size(const std::vector<std::string>& ops, std::size_t end) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < end && i < ops.size(); ++i) {
    if (code(ops[i]) == 'q' || code(ops[i]) == 'r') {
      if (auto v = int_of(ops[i])) n = std::max<std::uint64_t>(n, static_cast<std::uint64_t>(*v) + 1);
    } else if (code(ops[i]) == 0x94) {
      ++n;
    }
  }
  return n;
}

// ---- storages -------------------------------------------------------------------------------

/// A storage a pickle names: ('storage', torch.<cls>, key, location, count).
struct StorageRef {
  std::string cls;
  std::string key;
  std::int64_t count = 0;
  int count_op = -1;  ///< the opcode that wrote the count, when not a memo GET
};

/// Bytes an element of torch.<cls> (1 where unknown).
inline int element_size(std::string_view cls) {
  static const std::map<std::string_view, int> kSizes = {
      {"DoubleStorage", 8}, {"FloatStorage", 4}, {"HalfStorage", 2}, {"LongStorage", 8},
      {"IntStorage", 4}, {"ShortStorage", 2}, {"CharStorage", 1}, {"ByteStorage", 1},
      {"BoolStorage", 1}, {"BFloat16Storage", 2}, {"ComplexDoubleStorage", 16},
      {"ComplexFloatStorage", 8}, {"ComplexHalfStorage", 4}, {"UInt16Storage", 2},
      {"UInt32Storage", 4}, {"UInt64Storage", 8}, {"UntypedStorage", 1}};
  const auto it = kSizes.find(cls);
  return it == kSizes.end() ? 1 : it->second;
}

/// The storages of a pickle, found by following its stack and memo roughly (strs, ints, globals
/// and short tuples; anything else is "a value"). Stops quietly where the pickle stops making
/// sense: it guides mutations, it checks nothing.
inline std::vector<StorageRef> find_storages(const std::vector<std::string>& ops) {
  struct Flat {
    char kind = 'o';  // 's' str, 'i' int, 'g' global, 'o' other
    std::string text;
    std::int64_t i = 0;
    int op = -1;
  };
  struct Val {
    Flat v;
    std::vector<Flat> items;  // tuples of at most 5
  };
  std::vector<Val> stack;
  std::vector<std::size_t> marks;
  std::map<std::uint64_t, Val> memo;
  std::vector<StorageRef> out;
  auto pop_to = [&](std::size_t from) {
    Val t;
    if (stack.size() - from <= 5) {
      for (std::size_t k = from; k < stack.size(); ++k) t.items.push_back(stack[k].v);
    }
    stack.resize(from);
    return t;
  };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const std::string& op = ops[i];
    const unsigned char c = code(op);
    if (c == '.') break;
    if (c == 0x80 || c == 0x95) continue;
    if (c == '(') { marks.push_back(stack.size()); continue; }
    if (auto s = str_of(op)) { stack.push_back({{'s', *s, 0, -1}, {}}); continue; }
    if (!is_memo(op)) {
      if (auto v = int_of(op)) { stack.push_back({{'i', "", *v, static_cast<int>(i)}, {}}); continue; }
    }
    if (c == 'c') {
      const std::size_t nl = op.find('\n');
      if (nl == std::string::npos || op.back() != '\n') break;
      stack.push_back({{'g', op.substr(1, nl - 1) + "." + op.substr(nl + 1, op.size() - nl - 2)}, {}});
      continue;
    }
    if (c == 'N' || c == 0x88 || c == 0x89 || c == 'G' || c == ']' || c == '}' || c == ')') {
      stack.push_back({});
      continue;
    }
    const std::optional<std::int64_t> index = int_of(op);
    if (is_memo(op) && !index) break;
    if (c == 'h' || c == 'j') {
      const auto it = memo.find(static_cast<std::uint64_t>(*index));
      stack.push_back(it == memo.end() ? Val{} : it->second);
      continue;
    }
    if (c == 't' || c == 'e' || c == 'u' || c == '1') {
      if (marks.empty() || marks.back() > stack.size()) break;
      Val t = pop_to(marks.back());
      marks.pop_back();
      if (c == 't') stack.push_back(std::move(t));
      continue;
    }
    const std::size_t floor = marks.empty() ? 0 : marks.back();
    auto need = [&](std::size_t n) { return stack.size() >= floor + n; };
    if (c >= 0x85 && c <= 0x87) {
      if (!need(c - 0x84u)) break;
      stack.push_back(pop_to(stack.size() - (c - 0x84u)));
    } else if (c == 'q' || c == 'r' || c == 0x94) {
      if (!need(1)) break;
      memo[c == 0x94 ? memo.size() : static_cast<std::uint64_t>(*index)] = stack.back();
    } else if (c == 'a' || c == 'b' || c == '0') {
      if (!need(1)) break;
      stack.pop_back();
    } else if (c == 's') {
      if (!need(2)) break;
      stack.resize(stack.size() - 2);
    } else if (c == 'R' || c == 0x93) {
      if (!need(2)) break;
      Val made;
      if (c == 0x93 && stack[stack.size() - 2].v.kind == 's' && stack.back().v.kind == 's') {
        made.v = {'g', stack[stack.size() - 2].v.text + "." + stack.back().v.text};
      }
      stack.resize(stack.size() - 2);
      stack.push_back(std::move(made));
    } else if (c == 'Q') {
      if (!need(1)) break;
      const std::vector<Flat> f = stack.back().items;
      stack.back() = Val{};
      if (f.size() == 5 && f[0].kind == 's' && f[0].text == "storage" && f[1].kind == 'g' &&
          f[1].text.rfind("torch.", 0) == 0 && f[2].kind == 's' && f[4].kind == 'i') {
        out.push_back({f[1].text.substr(6), f[2].text, f[4].i, f[4].op});
      }
    } else if (c == '2') {
      if (!need(1)) break;
      stack.push_back(stack.back());
    } else {
      break;  // an opcode this simulation does not follow
    }
  }
  return out;
}

}  // namespace mixprec::fuzz
