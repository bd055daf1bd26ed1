// Pickle opcodes for the structure-aware mutator (torch_save_mutator.h): a pickle split into its
// opcodes and put back byte for byte, encoders of the values torch.save writes, a rough simulation
// that finds the storages a pickle names and the opcode of each count, and the values drawn from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
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
  // clang-format off
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
  // clang-format on
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
  // clang-format off
  switch (code(op)) {
    case 'K': case 'q': case 'h':
      if (n != 2) return std::nullopt;
      return static_cast<std::int64_t>(little_at(op, 1, 1));
    case 'M':
      if (n != 3) return std::nullopt;
      return static_cast<std::int64_t>(little_at(op, 1, 2));
    case 'J':
      if (n != 5) return std::nullopt;
      return static_cast<std::int32_t>(little_at(op, 1, 4));
    case 'r': case 'j':
      if (n != 5) return std::nullopt;
      return static_cast<std::int64_t>(little_at(op, 1, 4));
    case 0x8a: {
      if (n < 2) return std::nullopt;
      const std::size_t bytes = static_cast<unsigned char>(op[1]);
      if (bytes == 0 || bytes > 8 || n != 2 + bytes) return std::nullopt;
      std::uint64_t v = little_at(op, 2, static_cast<int>(bytes));
      if (bytes < 8 && (static_cast<unsigned char>(op[1 + bytes]) & 0x80) != 0) {
        v |= ~std::uint64_t{0} << (8 * bytes);
      }
      return static_cast<std::int64_t>(v);
    }
    default: return std::nullopt;
  }
}
// clang-format on
inline bool is_memo(const std::string& op) {
  const unsigned char c = code(op);
  return c == 'q' || c == 'h' || c == 'r' || c == 'j';
}
/// The str of a BINUNICODE, SHORT_BINUNICODE or BINUNICODE8.
inline std::optional<std::string> str_of(const std::string& op) {
  // clang-format off
  switch (code(op)) {
    case 'X': return op.size() >= 5 ? std::optional<std::string>(op.substr(5)) : std::nullopt;
    case 0x8c: return op.size() >= 2 ? std::optional<std::string>(op.substr(2)) : std::nullopt;
    case 0x8d: return op.size() >= 9 ? std::optional<std::string>(op.substr(9)) : std::nullopt;
    default: return std::nullopt;
  }
  // clang-format on
}

/// Opcodes that push one value and pop none: a value of any kind can take their place.
inline bool is_leaf(const std::string& op) {
  // clang-format off
  switch (code(op)) {
    case 'N': case 0x88: case 0x89: case 'K': case 'M': case 'J': case 0x8a: case 'G': case 'X':
    case 0x8c: case 0x8d: case ')': case 'h': case 'j':
      return true;
    default:
      return false;
  }
  // clang-format on
}

/// The memo's size before opcode `end`, as the picklers number it (PUTs in order, MEMOIZE next).
inline std::uint64_t memo_size(const std::vector<std::string>& ops, std::size_t end) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < end && i < ops.size(); ++i) {
    if (code(ops[i]) == 'q' || code(ops[i]) == 'r') {
      if (auto v = int_of(ops[i]))
        n = std::max<std::uint64_t>(n, static_cast<std::uint64_t>(*v) + 1);
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
  // clang-format off
  static const std::map<std::string_view, int> kSizes = {
      {"DoubleStorage", 8}, {"FloatStorage", 4}, {"HalfStorage", 2}, {"LongStorage", 8},
      {"IntStorage", 4}, {"ShortStorage", 2}, {"CharStorage", 1}, {"ByteStorage", 1},
      {"BoolStorage", 1}, {"BFloat16Storage", 2}, {"ComplexDoubleStorage", 16},
      {"ComplexFloatStorage", 8}, {"ComplexHalfStorage", 4}, {"UInt16Storage", 2},
      {"UInt32Storage", 4}, {"UInt64Storage", 8}, {"UntypedStorage", 1}};
  // clang-format on
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
    if (c == '(') {
      marks.push_back(stack.size());
      continue;
    }
    if (auto s = str_of(op)) {
      stack.push_back({{'s', *s, 0, -1}, {}});
      continue;
    }
    if (!is_memo(op)) {
      if (auto v = int_of(op)) {
        stack.push_back({{'i', "", *v, static_cast<int>(i)}, {}});
        continue;
      }
    }
    if (c == 'c') {
      const std::size_t nl = op.find('\n');
      if (nl == std::string::npos || op.back() != '\n') break;
      stack.push_back(
          {{'g', op.substr(1, nl - 1) + "." + op.substr(nl + 1, op.size() - nl - 2)}, {}});
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

// ---- what the mutator draws from (torch_save_mutator.h) ------------------------------------

// Ints at the edges of what the reader checks: signs, 32/64-bit limits, products that overflow
// when multiplied by an element size or a dimension.
// clang-format off
constexpr std::int64_t kInts[] = {0, 1, 2, 3, 4, -1, -2, 7, 8, 12, 16, 63, 64, 255, 256, 999, 1000,
                                  1001, 65535, 65536, INT32_MAX, std::int64_t{1} << 31,
                                  INT32_MIN, (std::int64_t{1} << 32) - 1, std::int64_t{1} << 32,
                                  std::int64_t{1} << 60, std::int64_t{1} << 61,
                                  std::int64_t{1} << 62, INT64_MAX, INT64_MIN, INT64_MAX / 2 + 1,
                                  INT64_MAX / 4 + 1, INT64_MAX / 8 + 1, INT64_MAX / 16 + 1};
constexpr const char* kStrings[] = {
    "storage", "cpu", "cuda:0", "meta", "0", "1", "2", "", "state", "param_groups", "model",
    "optimizer", "scaler", "scale", "growth_factor", "backoff_factor", "growth_interval",
    "_growth_tracker", "step", "exp_avg", "exp_avg_sq", "lr", "params", "weight", "bias",
    "running_mean", "num_batches_tracked", "List[int]", "List[float]", "List[bool]",
    "List[Tensor]", "Dict[str, Any]", "Dict[int, Tensor]", "torch", "torch._utils",
    "collections", "OrderedDict", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "FloatStorage",
    "UntypedStorage", "float32", "__torch__", "Module", "\xff\xfe", "\xed\xa0\x80", "\xc0\x80"};
constexpr const char* kStorageClasses[] = {
    "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
    "IntStorage", "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage",
    "ComplexFloatStorage", "ComplexDoubleStorage", "ComplexHalfStorage", "UInt16Storage",
    "UInt32Storage", "UInt64Storage", "Float8_e4m3fnStorage", "UntypedStorage", "QInt8Storage"};
constexpr const char* kDtypes[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32",
                                   "int16", "int8", "uint8", "bool", "complex64", "complex128",
                                   "complex32", "uint16", "uint64", "float8_e4m3fn",
                                   "float8_e5m2", "float4_e2m1fn_x2", "qint8"};
constexpr int kDtypeSizes[] = {4, 8, 2, 2, 8, 4, 2, 1, 1, 1, 8, 16, 4, 2, 8, 1, 1, 1, 1};
static_assert(sizeof(kDtypeSizes) / sizeof(int) == sizeof(kDtypes) / sizeof(kDtypes[0]),
              "one size a dtype");
// module, name: the allowed globals and ones refused by name.
constexpr const char* kGlobals[][2] = {
    {"collections", "OrderedDict"}, {"torch._utils", "_rebuild_tensor"},
    {"torch._utils", "_rebuild_tensor_v2"}, {"torch._utils", "_rebuild_tensor_v3"},
    {"torch._utils", "_rebuild_parameter"}, {"torch._utils", "_rebuild_parameter_with_state"},
    {"torch.jit._pickle", "restore_type_tag"}, {"torch.jit._pickle", "build_intlist"},
    {"torch.jit._pickle", "build_doublelist"}, {"torch.jit._pickle", "build_boollist"},
    {"torch.jit._pickle", "build_tensorlist"}, {"torch._utils", "_rebuild_qtensor"},
    {"torch._utils", "_rebuild_sparse_tensor"}, {"torch._utils", "_rebuild_nested_tensor"},
    {"torch._utils", "_rebuild_meta_tensor_no_storage"},
    {"torch._utils", "_rebuild_wrapper_subclass"},
    {"torch._utils", "_rebuild_device_tensor_from_numpy"}, {"torch.serialization", "_get_layout"},
    {"torch._tensor", "_rebuild_from_type_v2"}, {"builtins", "eval"}, {"__builtin__", "set"},
    {"torch", "Tensor"}, {"__torch__", "Module"}, {"torch", "float32"}, {"torch", "FloatStorage"}};
// One opcode each, with arguments: everything of protocols 0 to 5, refused ones included.
constexpr const char* kOps[] = {
    "(", ".", "0", "1", "2", "N", "\x88", "\x89", ")", "]", "}", "t", "\x85", "\x86", "\x87",
    "a", "e", "s", "u", "R", "b", "Q", "\x93", "\x94", "\x8f", "\x90", "\x91", "\x81", "\x92",
    "\x97", "\x98", "o", "d", "l", "I1\n", "L1L\n", "F1.0\n", "S'a'\n", "Va\n", "p0\n", "g0\n",
    "P0\n", "i__builtin__\nobject\n", "C\x01x", "\x8f"};
constexpr double kDoubles[] = {0.0, -0.0, 1.0, 0.5, 2.0, 65536.0, 1e308, 5e-324,
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()};
constexpr int kDepths[] = {1, 2, 3, 8, 64, 998, 999, 1000, 1001, 1500};
// clang-format on

/// Ops with arguments that a string table cannot hold (NULs).
template <typename Rng>
inline std::string raw_op(Rng& rng) {
  switch (rng() % 8) {
    case 0:
      return std::string("\x80", 1) + static_cast<char>(rng() % 7);  // PROTO
    case 1:
      return std::string("\x95", 1) + little_bytes(rng(), 8);  // FRAME
    case 2:
      return std::string("\x8a\x09", 2) + little_bytes(rng(), 8) + '\x01';  // 2^64+
    case 3:
      return std::string("\x8b\x01\x00\x00\x00\x01", 6);  // LONG4
    case 4:
      return std::string("B\x01\x00\x00\x00x", 6);  // BINBYTES
    case 5:
      return std::string("\x8d", 1) + little_bytes(1, 8) + "k";  // BINUNICODE8
    case 6:
      return std::string("X\xff\xff\xff\x7f", 5);  // past the end
    default:
      return std::string("\x82\x01", 2);  // EXT1
  }
}

}  // namespace mixprec::fuzz
