// mixprec's restricted unpickler (pickle_reader.h): the opcodes and globals of torch.save's state
// dicts, every count, size and reference checked, the result a flat tree of nodes that is
// destroyed without recursion.
#include "torch/checkpoint/pickle_reader.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

namespace mixprec::detail::pickle {
namespace {

constexpr DtypeInfo kDtypes[] = {
    {"uint8", "ByteStorage", 1, 1},
    {"int8", "CharStorage", 1, 1},
    {"int16", "ShortStorage", 2, 2},
    {"int32", "IntStorage", 4, 4},
    {"int64", "LongStorage", 8, 8},
    {"float16", "HalfStorage", 2, 2},
    {"float32", "FloatStorage", 4, 4},
    {"float64", "DoubleStorage", 8, 8},
    {"complex32", "ComplexHalfStorage", 4, 2},
    {"complex64", "ComplexFloatStorage", 8, 4},
    {"complex128", "ComplexDoubleStorage", 16, 8},
    {"bool", "BoolStorage", 1, 1},
    {"bfloat16", "BFloat16Storage", 2, 2},
    {"float8_e5m2", "Float8_e5m2Storage", 1, 1},
    {"float8_e4m3fn", "Float8_e4m3fnStorage", 1, 1},
    {"float8_e5m2fnuz", "Float8_e5m2fnuzStorage", 1, 1},
    {"float8_e4m3fnuz", "Float8_e4m3fnuzStorage", 1, 1},
    {"uint16", "UInt16Storage", 2, 2},
    {"uint32", "UInt32Storage", 4, 4},
    {"uint64", "UInt64Storage", 8, 8},
    {"float8_e8m0fnu", "Float8_e8m0fnuStorage", 1, 1},
    {"float4_e2m1fn_x2", "Float4_e2m1fn_x2Storage", 1, 1},
    {"uint8", "UntypedStorage", 1, 1},
};
constexpr int kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);

// The globals a state dict needs (Note [Restricted unpickler]).
enum class Global : std::uint8_t {
  kOrderedDict, kRebuildTensor, kRebuildTensorV2, kRebuildTensorV3, kRebuildParameter,
  kRebuildParameterWithState, kRestoreTypeTag, kBuildIntList, kBuildDoubleList, kBuildBoolList,
  kBuildTensorList, kStorageType, kDtype
};

// Note [Restricted unpickler]
// PyTorch's answer to untrusted checkpoints is torch/_weights_only_unpickler.py, an unpickler
// written from scratch with allow-lists of opcodes and globals. This is mixprec's, narrower:
// - Opcodes: those Python's pickler writes at protocols 2 to 5 for None, bools, ints, floats,
//   strs, tuples, lists, dicts and the globals below (PROTO, FRAME, STOP, MARK, the memo's PUT,
//   GET and MEMOIZE, GLOBAL, STACK_GLOBAL, REDUCE, BUILD, BINPERSID), as torch.save writes
//   state dicts, and those of LibTorch's pickler (torch::pickle_save, mixprec's own files). The
//   rest (bytes, sets, NEWOBJ, POP, DUP, protocol 0's text forms, out-of-band buffers) is
//   refused by name.
// - Globals: collections.OrderedDict (BUILD may set its attributes, which are dropped: module
//   versions), torch._utils' dense tensor and parameter rebuilds, the storage classes and
//   dtypes of dense tensors, and LibTorch's torch.jit._pickle list builders and type tags. Sparse,
//   quantized, nested, meta and subclassed tensors are refused by name.
// - Storages: a persistent id ('storage', class, key, location, count) names record data/<key>,
//   read once and shared by every tensor on it, as torch.load does; a key stated again must
//   state the same class and count. Each tensor's offset, sizes and strides are checked to stay
//   inside its storage, in 128-bit arithmetic.
// - The memo is numbered 0, 1, 2, ... as Python's and LibTorch's picklers write it: a PUT past
//   its end is refused (LibTorch's unpickler sized its memo by a PUT of 2^32 - 1).
// - Values are nodes in one array, items referred to by index: nothing is recursive, however
//   deep the pickle nests. After STOP one walk from the root, with an explicit stack, refuses
//   cycles (made through the memo), nesting past Limits::depth, trees larger than
//   Limits::expanded written out, dict keys that are not a str or an int (the keys LibTorch's
//   dicts can hash and state dicts have),
//   typed lists with other items, and tensors with hooks or metadata.
// - Memory: a node is 16 bytes and each opcode makes at most one; a tensor rebuilt twice from
//   one argument tuple (one GET) is the same tensor, so that 5 bytes of pickle cannot make a
//   new tensor.

constexpr std::uint8_t kOrderedFlag = 1;

struct Op {
  unsigned char code;
  const char* name;
};
// Every opcode of protocols 0 to 5 by name, for messages.
constexpr Op kOpNames[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"},
    {'I', "INT"}, {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"},
    {'N', "NONE"}, {'P', "PERSID"}, {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"},
    {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"}, {'X', "BINUNICODE"},
    {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"}, {'}', "EMPTY_DICT"},
    {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
    {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"},
    {'r', "LONG_BINPUT"}, {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"}, {'G', "BINFLOAT"}, {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"},
    {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"},
    {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"}, {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
    {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
};

std::string op_name(unsigned char code) {
  for (const Op& op : kOpNames) {
    if (op.code == code) return op.name;
  }
  return "an unknown opcode";
}

// Text from the file, for a message: at most 64 bytes, other than printable ASCII escaped.
std::string shown(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + (text.size() > 64 ? "\"..." : "\"");
}

// Python decodes a pickle's str as UTF-8 with "surrogatepass": well-formed sequences, surrogates
// allowed.
bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < min || cp > 0x10ffff) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

const DtypeInfo& info(Dtype dtype) { return kDtypes[static_cast<int>(dtype)]; }

const std::uint32_t* Tree::items(std::uint32_t id, std::uint32_t& count) const {
  const Node& n = nodes_[id];
  if (n.kind == Kind::kTuple) {
    count = n.count;
    return pool_.data() + n.value;
  }
  count = list_start_[id + 1] - list_start_[id];
  return list_items_.data() + list_start_[id];
}

std::string_view Tree::string(std::uint32_t id) const {
  return pickle_.substr(nodes_[id].value, nodes_[id].count);
}

std::vector<std::int64_t> Tree::ints(std::uint32_t tuple) const {
  std::uint32_t count = 0;
  const std::uint32_t* items = this->items(tuple, count);
  std::vector<std::int64_t> out(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    out[i] = static_cast<std::int64_t>(nodes_[items[i]].value);
  }
  return out;
}

class Reader {
 public:
  Reader(std::string_view pickle, const std::string& where, const Limits& limits)
      : in_(pickle), where_(where), limits_(limits) {
    tree_.pickle_ = pickle;
  }

  Tree run() {
    while (true) {
      fail_if(pos_ >= in_.size(), "the pickle ends before its STOP opcode");
      at_ = pos_;
      const auto code = static_cast<unsigned char>(in_[pos_++]);
      if (code == '.') break;
      step(code);
    }
    fail_if(marks_.size() != 0 || stack_.size() != 1, "STOP leaves ", stack_.size(),
            " values and ", marks_.size(), " marks; a pickle leaves one value");
    fail_if(pos_ != in_.size(), "the pickle has ", in_.size() - pos_, " bytes after its STOP");
    finish(stack_.back());
    return std::move(tree_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... why) const {
    TORCH_CHECK(false, "mixprec: ", where_, ": data.pkl, byte ", at_, ": ", why...);
  }
  template <typename... Args>
  void fail_if(bool bad, const Args&... why) const {
    if (bad) fail(why...);
  }

  // ---- bytes ------------------------------------------------------------------------------
  std::string_view take(std::uint64_t n) {
    fail_if(n > in_.size() - pos_, op_name(static_cast<unsigned char>(in_[at_])),
            " needs ", n, " bytes and the pickle has ", in_.size() - pos_, " left");
    const std::string_view out = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  std::uint64_t little(int bytes) {
    const std::string_view b = take(static_cast<std::uint64_t>(bytes));
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[i]);
    return v;
  }
  std::string_view line() {
    const std::size_t end = in_.find('\n', pos_);
    fail_if(end == std::string_view::npos || end - pos_ > 256,
            "GLOBAL needs a module and a name of at most 256 bytes, each ending a line");
    const std::string_view out = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }

  // ---- nodes and the stack --------------------------------------------------------------------
  std::uint32_t add(Kind kind, std::uint64_t value = 0, std::uint32_t count = 0,
                    std::uint8_t tag = 0) {
    fail_if(tree_.nodes_.size() >= std::numeric_limits<std::uint32_t>::max() - 1,
            "the pickle makes more than 2^32 values");
    tree_.nodes_.push_back(Node{kind, tag, count, value});
    return static_cast<std::uint32_t>(tree_.nodes_.size() - 1);
  }
  const Node& node(std::uint32_t id) const { return tree_.nodes_[id]; }
  void push(std::uint32_t id) { stack_.push_back(id); }
  // How many values lie above the last MARK (a MARK is a floor the other opcodes cannot pop).
  std::size_t above_mark() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  std::uint32_t pop() {
    fail_if(above_mark() == 0, op_name(static_cast<unsigned char>(in_[at_])),
            " on an empty stack");
    const std::uint32_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  std::uint32_t& top() {
    fail_if(above_mark() == 0, op_name(static_cast<unsigned char>(in_[at_])),
            " on an empty stack");
    return stack_.back();
  }
  // The values from the last MARK on, which are taken off with the MARK.
  std::size_t pop_mark() {
    fail_if(marks_.empty(), op_name(static_cast<unsigned char>(in_[at_])), " without a MARK");
    const std::size_t from = marks_.back();
    marks_.pop_back();
    return from;
  }
  std::uint32_t tuple(std::size_t from) {
    const std::uint64_t first = tree_.pool_.size();
    tree_.pool_.insert(tree_.pool_.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from),
                       stack_.end());
    const auto count = static_cast<std::uint32_t>(stack_.size() - from);
    stack_.resize(from);
    return add(Kind::kTuple, first, count);
  }
  // Adds items to the list or dict below them (APPEND, APPENDS, SETITEM, SETITEMS).
  void extend(std::size_t from, Kind target) {
    fail_if(from == 0 || from - 1 < (marks_.empty() ? 0 : marks_.back()),
            op_name(static_cast<unsigned char>(in_[at_])), " with no ",
            target == Kind::kList ? "list" : "dict", " below its items");
    const std::uint32_t into = stack_[from - 1];
    fail_if(node(into).kind != target, op_name(static_cast<unsigned char>(in_[at_])), " into a ",
            kind_name(into), "; it takes a ", target == Kind::kList ? "list" : "dict");
    fail_if(target == Kind::kDict && (stack_.size() - from) % 2 != 0,
            "SETITEMS with a key and no value");
    for (std::size_t i = from; i < stack_.size(); ++i) edges_.emplace_back(into, stack_[i]);
    stack_.resize(from);
  }

  const char* kind_name(std::uint32_t id) const {
    switch (node(id).kind) {
      case Kind::kNone: return "None";
      case Kind::kBool: return "bool";
      case Kind::kInt: return "int";
      case Kind::kFloat: return "float";
      case Kind::kString: return "str";
      case Kind::kTuple: return "tuple";
      case Kind::kList: return "list";
      case Kind::kDict: return "dict";
      case Kind::kGlobal: return "global";
      case Kind::kStorage: return "storage";
      case Kind::kTensor: return "tensor";
    }
    return "value";
  }

  // ---- opcodes ----------------------------------------------------------------------------------
  void step(unsigned char code) {
    switch (code) {
      case 0x80: {  // PROTO
        const std::uint64_t v = little(1);
        fail_if(v < 2 || v > 5, "pickle protocol ", v, "; torch.save writes 2 to 5");
        return;
      }
      case 0x95: (void)little(8); return;  // FRAME: a hint for buffered readers
      case '(': marks_.push_back(stack_.size()); return;
      case 'N': push(add(Kind::kNone)); return;
      case 0x88: push(add(Kind::kBool, 1)); return;
      case 0x89: push(add(Kind::kBool, 0)); return;
      case 'J': push(add(Kind::kInt, static_cast<std::uint64_t>(static_cast<std::int64_t>(
                                         static_cast<std::int32_t>(little(4))))));
        return;
      case 'K': push(add(Kind::kInt, little(1))); return;
      case 'M': push(add(Kind::kInt, little(2))); return;
      case 0x8a: long1(); return;
      case 'G': {
        const std::string_view b = take(8);
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(b[i]);
        push(add(Kind::kFloat, bits));
        return;
      }
      case 'X': string(little(4)); return;
      case 0x8c: string(little(1)); return;
      case 0x8d: string(little(8)); return;
      case ')': push(add(Kind::kTuple, 0, 0)); return;
      case 't': push(tuple(pop_mark())); return;
      case 0x85: case 0x86: case 0x87: {
        const std::size_t n = code - 0x84u;
        fail_if(above_mark() < n, op_name(code), " needs ", n, " values above the last MARK");
        push(tuple(stack_.size() - n));
        return;
      }
      case ']': push(add(Kind::kList)); return;
      case '}': push(add(Kind::kDict)); return;
      case 'a':
        fail_if(above_mark() < 1, "APPEND needs a value");
        extend(stack_.size() - 1, Kind::kList);
        return;
      case 's':
        fail_if(above_mark() < 2, "SETITEM needs a key and a value");
        extend(stack_.size() - 2, Kind::kDict);
        return;
      case 'e': extend(pop_mark(), Kind::kList); return;
      case 'u': extend(pop_mark(), Kind::kDict); return;
      case 'q': put(little(1)); return;
      case 'r': put(little(4)); return;
      case 0x94: put(memo_.size()); return;
      case 'h': get(little(1)); return;
      case 'j': get(little(4)); return;
      case 'c': {
        const std::string_view module = line();
        const std::string_view name = line();
        push(global(module, name));
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        const std::uint32_t name = pop(), module = pop();
        fail_if(node(name).kind != Kind::kString || node(module).kind != Kind::kString,
                "STACK_GLOBAL needs a module and a name as strs");
        push(global(tree_.string(module), tree_.string(name)));
        return;
      }
      case 'R': reduce(); return;
      case 'b': build(); return;
      case 'Q': push(persistent_id(pop())); return;
      default:
        fail("pickle opcode ", op_name(code), " (", static_cast<int>(code),
             ") is not one torch.save writes for a state dict; mixprec's loads refuse it");
    }
  }

  void long1() {
    const std::uint64_t n = little(1);
    const std::string_view b = take(n);
    fail_if(n > 8, "an int of ", n, " bytes, beyond int64");
    std::uint64_t v = 0;
    for (std::uint64_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
    if (n > 0 && n < 8 && (static_cast<unsigned char>(b[n - 1]) & 0x80) != 0) {
      v |= ~std::uint64_t{0} << (8 * n);  // two's complement: sign-extend
    }
    push(add(Kind::kInt, v));
  }

  void string(std::uint64_t size) {
    const std::uint64_t offset = pos_;
    const std::string_view s = take(size);
    fail_if(size > std::numeric_limits<std::uint32_t>::max(), "a str of ", size, " bytes");
    fail_if(!is_utf8(s), "a str that is not UTF-8: ", shown(s));
    push(add(Kind::kString, offset, static_cast<std::uint32_t>(size)));
  }

  void put(std::uint64_t index) {
    // Python's and LibTorch's picklers number the memo 0, 1, 2, ... (Note [Restricted unpickler]).
    fail_if(index > memo_.size(), "a memo PUT at index ", index, " after ", memo_.size(),
            " entries (picklers number them in order)");
    const std::uint32_t value = top();
    if (index == memo_.size()) {
      memo_.push_back(value);
    } else {
      memo_[static_cast<std::size_t>(index)] = value;
    }
  }
  void get(std::uint64_t index) {
    fail_if(index >= memo_.size(), "a memo GET of index ", index, ", of ", memo_.size(),
            " entries");
    push(memo_[static_cast<std::size_t>(index)]);
  }

  std::uint32_t global(std::string_view module, std::string_view name) {
    auto is = [&](const char* m, const char* n) { return module == m && name == n; };
    if (is("collections", "OrderedDict")) return add_global(Global::kOrderedDict);
    if (module == "torch._utils") {
      if (name == "_rebuild_tensor") return add_global(Global::kRebuildTensor);
      if (name == "_rebuild_tensor_v2") return add_global(Global::kRebuildTensorV2);
      if (name == "_rebuild_tensor_v3") return add_global(Global::kRebuildTensorV3);
      if (name == "_rebuild_parameter") return add_global(Global::kRebuildParameter);
      if (name == "_rebuild_parameter_with_state") {
        return add_global(Global::kRebuildParameterWithState);
      }
    }
    if (module == "torch.jit._pickle") {
      if (name == "restore_type_tag") return add_global(Global::kRestoreTypeTag);
      if (name == "build_intlist") return add_global(Global::kBuildIntList);
      if (name == "build_doublelist") return add_global(Global::kBuildDoubleList);
      if (name == "build_boollist") return add_global(Global::kBuildBoolList);
      if (name == "build_tensorlist") return add_global(Global::kBuildTensorList);
    }
    if (is("torch.storage", "UntypedStorage")) {  // Python's module for it; LibTorch's "torch"
      return add_global(Global::kStorageType, static_cast<int>(Dtype::kUntyped));
    }
    if (module == "torch") {
      for (int d = 0; d < kNumDtypes; ++d) {
        if (name == kDtypes[d].storage) return add_global(Global::kStorageType, d);
        if (d != static_cast<int>(Dtype::kUntyped) && name == kDtypes[d].python) {
          return add_global(Global::kDtype, d);
        }
      }
    }
    const std::string full = std::string(module) + "." + std::string(name);
    const char* why = "it is not one a state dict needs";
    if (full.find("sparse") != std::string::npos || full == "torch.serialization._get_layout") {
      why = "it rebuilds a sparse tensor; mixprec loads dense strided tensors only";
    } else if (full == "torch._utils._rebuild_qtensor" || (module == "torch" &&
               name.size() > 8 && name[0] == 'Q' && name.substr(name.size() - 7) == "Storage")) {
      why = "it rebuilds a quantized tensor; mixprec loads dense strided tensors only";
    } else if (full == "torch._utils._rebuild_nested_tensor") {
      why = "it rebuilds a nested tensor; mixprec loads dense strided tensors only";
    } else if (full == "torch._utils._rebuild_meta_tensor_no_storage") {
      why = "it rebuilds a tensor without data (meta device); mixprec loads tensors with data";
    } else if (full == "torch._utils._rebuild_wrapper_subclass" ||
               full == "torch._tensor._rebuild_from_type_v2") {
      why = "it rebuilds a tensor subclass or a tensor with Python attributes";
    } else if (full.rfind("torch._utils._rebuild_device_tensor", 0) == 0) {
      why = "it rebuilds a tensor of a device through NumPy or the CPU";
    }
    fail("the global ", shown(full), " is refused: ", why);
  }
  std::uint32_t add_global(Global g, int dtype = 0) {
    return add(Kind::kGlobal, static_cast<std::uint64_t>(dtype), 0, static_cast<std::uint8_t>(g));
  }

  // The persistent id of a storage: ('storage', class, key, location, count).
  std::uint32_t persistent_id(std::uint32_t pid) {
    fail_if(node(pid).kind != Kind::kTuple || node(pid).count != 5,
            "BINPERSID of a ", kind_name(pid), "; torch.save's are ('storage', class, key, "
            "location, count)");
    const std::uint32_t* f = tree_.pool_.data() + node(pid).value;
    fail_if(node(f[0]).kind != Kind::kString || tree_.string(f[0]) != "storage",
            "a persistent id that is not a storage's");
    fail_if(node(f[1]).kind != Kind::kGlobal ||
                static_cast<Global>(node(f[1]).tag) != Global::kStorageType,
            "a storage whose class is a ", kind_name(f[1]), ", not a storage class");
    fail_if(node(f[2]).kind != Kind::kString || node(f[3]).kind != Kind::kString ||
                node(f[4]).kind != Kind::kInt,
            "a storage's key and location must be strs and its count an int");
    const std::string_view key = tree_.string(f[2]);
    const auto dtype = static_cast<Dtype>(node(f[1]).value);
    const auto count = static_cast<std::int64_t>(node(f[4]).value);
    fail_if(count < 0 || static_cast<std::uint64_t>(count) >
                             static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) /
                                 info(dtype).size,
            "storage ", shown(key), " has ", count, " elements of ", static_cast<int>(info(dtype).size),
            " bytes, which no file holds");
    const auto [it, added] = storage_of_key_.emplace(key, tree_.storages_.size());
    if (!added) {
      const Storage& s = tree_.storages_[it->second];
      fail_if(s.dtype != dtype || s.count != static_cast<std::uint64_t>(count), "storage ",
              shown(key), " is stated again with another class or count (", info(dtype).storage,
              " of ", count, "; first ", info(s.dtype).storage, " of ", s.count, ")");
      return storage_nodes_[it->second];
    }
    Storage s;
    s.key = key;
    s.dtype = dtype;
    s.count = static_cast<std::uint64_t>(count);
    s.bytes = s.count * info(dtype).size;
    tree_.storages_.push_back(s);
    storage_nodes_.push_back(add(Kind::kStorage, tree_.storages_.size() - 1));
    return storage_nodes_.back();
  }

  void reduce() {
    const std::uint32_t args = pop();
    std::uint32_t& func = top();
    fail_if(node(func).kind != Kind::kGlobal, "REDUCE calls a ", kind_name(func),
            "; only the allowed globals can be called");
    fail_if(node(args).kind != Kind::kTuple, "REDUCE with a ", kind_name(args),
            " as its arguments; they must be a tuple");
    const auto g = static_cast<Global>(node(func).tag);
    std::uint32_t n = 0;
    const std::uint32_t* a = tree_.items(args, n);
    // Python's weights-only unpickler checks no argument count: a wrong one raises TypeError.
    auto arity = [&](std::uint32_t lo, std::uint32_t hi, const char* what) {
      fail_if(n < lo || n > hi, what, " takes ", lo, lo == hi ? "" : " or more", " arguments, got ",
              n);
    };
    switch (g) {
      case Global::kOrderedDict:
        arity(0, 0, "collections.OrderedDict");  // torch.save's OrderedDict(), items later
        func = add(Kind::kDict, 0, 0, kOrderedFlag);
        return;
      case Global::kRestoreTypeTag:
        arity(2, 2, "torch.jit._pickle.restore_type_tag");
        fail_if(node(a[1]).kind != Kind::kString, "restore_type_tag's type must be a str");
        func = tag_list(a[0], type_of_tag(tree_.string(a[1])));
        return;
      case Global::kBuildIntList: arity(1, 1, "build_intlist"); func = tag_list(a[0], Kind::kInt);
        return;
      case Global::kBuildDoubleList:
        arity(1, 1, "build_doublelist");
        func = tag_list(a[0], Kind::kFloat);
        return;
      case Global::kBuildBoolList:
        arity(1, 1, "build_boollist");
        func = tag_list(a[0], Kind::kBool);
        return;
      case Global::kBuildTensorList:
        arity(1, 1, "build_tensorlist");
        func = tag_list(a[0], Kind::kTensor);
        return;
      case Global::kRebuildTensor:
      case Global::kRebuildTensorV2:
      case Global::kRebuildTensorV3:
      case Global::kRebuildParameter:
      case Global::kRebuildParameterWithState: {
        const auto [it, added] = rebuilt_.emplace((std::uint64_t{args} << 8) | node(func).tag, 0);
        if (added) it->second = rebuild(g, a, n);
        func = it->second;
        return;
      }
      case Global::kStorageType:
      case Global::kDtype:
        break;
    }
    const DtypeInfo& d = info(static_cast<Dtype>(node(func).value));
    fail("REDUCE calls torch.", g == Global::kDtype ? d.python : d.storage,
         ", which is not a function");
  }

  // LibTorch's type tags: typed lists become lists whose items are checked; others change nothing.
  Kind type_of_tag(std::string_view type) const {
    if (type == "List[int]") return Kind::kInt;
    if (type == "List[float]") return Kind::kFloat;
    if (type == "List[bool]") return Kind::kBool;
    if (type == "List[Tensor]") return Kind::kTensor;
    return Kind::kNone;
  }
  std::uint32_t tag_list(std::uint32_t value, Kind items) {
    if (items == Kind::kNone) return value;
    fail_if(node(value).kind != Kind::kList, "a typed list built from a ", kind_name(value));
    fail_if(node(value).tag != 0 && node(value).tag != static_cast<std::uint8_t>(items),
            "one list typed twice");
    tree_.nodes_[value].tag = static_cast<std::uint8_t>(items);
    return value;
  }

  // A dense tensor: _rebuild_tensor(storage, offset, size, stride), _v2(..., requires_grad,
  // hooks[, metadata]), _v3(..., requires_grad, hooks, dtype[, metadata]); a parameter:
  // _rebuild_parameter(data, requires_grad, hooks[, state]).
  std::uint32_t rebuild(Global g, const std::uint32_t* a, std::uint32_t n) {
    Tensor t;
    if (g == Global::kRebuildParameter || g == Global::kRebuildParameterWithState) {
      const bool with_state = g == Global::kRebuildParameterWithState;
      fail_if(n != (with_state ? 4u : 3u), "_rebuild_parameter", with_state ? "_with_state" : "",
              " takes ", with_state ? 4 : 3, " arguments, got ", n);
      fail_if(node(a[0]).kind != Kind::kTensor || node(a[1]).kind != Kind::kBool,
              "_rebuild_parameter needs a tensor and a bool");
      t = tree_.tensors_[node(a[0]).value];
      t.requires_grad = node(a[1]).value != 0;
      must_be_empty(a[2], "a parameter's backward hooks");
      if (with_state) must_be_empty(a[3], "a parameter's Python attributes");
    } else {
      const char* who = g == Global::kRebuildTensor     ? "_rebuild_tensor"
                        : g == Global::kRebuildTensorV2 ? "_rebuild_tensor_v2"
                                                        : "_rebuild_tensor_v3";
      const std::uint32_t fixed = g == Global::kRebuildTensor ? 4 : g == Global::kRebuildTensorV2 ? 6 : 7;
      fail_if(n != fixed && !(g != Global::kRebuildTensor && n == fixed + 1), who, " takes ",
              fixed, g == Global::kRebuildTensor ? "" : " or one more", " arguments, got ", n);
      fail_if(node(a[0]).kind != Kind::kStorage, who, " needs a storage (a persistent id) first");
      t.storage = static_cast<std::uint32_t>(node(a[0]).value);
      const Storage& s = tree_.storages_[t.storage];
      t.dtype = s.dtype == Dtype::kUntyped ? Dtype::kUInt8 : s.dtype;
      if (g == Global::kRebuildTensorV3) {
        fail_if(node(a[6]).kind != Kind::kGlobal ||
                    static_cast<Global>(node(a[6]).tag) != Global::kDtype,
                "_rebuild_tensor_v3 needs a dtype seventh");
        t.dtype = static_cast<Dtype>(node(a[6]).value);
        fail_if(s.dtype != Dtype::kUntyped && s.dtype != t.dtype, "a ", info(t.dtype).python,
                " tensor on a ", info(s.dtype).storage);
      }
      fail_if(node(a[1]).kind != Kind::kInt, who, " needs an int storage offset");
      t.offset = static_cast<std::int64_t>(node(a[1]).value);
      t.sizes = a[2];
      t.strides = a[3];
      if (g != Global::kRebuildTensor) {
        fail_if(node(a[4]).kind != Kind::kBool, who, " needs a bool requires_grad");
        t.requires_grad = node(a[4]).value != 0;
        must_be_empty(a[5], "a tensor's backward hooks");
        if (n == fixed + 1) must_be_empty(a[n - 1], "a tensor's metadata (conjugate or negative bit)");
      }
      check_extent(t, s);
    }
    tree_.tensors_.push_back(t);
    return add(Kind::kTensor, tree_.tensors_.size() - 1);
  }

  // A dict that must stay empty: checked after STOP, since the memo can add to it later.
  void must_be_empty(std::uint32_t dict, const char* what) {
    fail_if(node(dict).kind != Kind::kDict && node(dict).kind != Kind::kNone, what,
            " must be an empty dict, got a ", kind_name(dict));
    if (node(dict).kind == Kind::kDict) empty_dicts_.emplace_back(dict, what);
  }

  void check_extent(const Tensor& t, const Storage& s) {
    __extension__ typedef unsigned __int128 Wide;  // sizes, strides and offset come from the file
    const std::uint32_t sizes_node = t.sizes, strides_node = t.strides;
    fail_if(node(sizes_node).kind != Kind::kTuple || node(strides_node).kind != Kind::kTuple,
            "a tensor's size and stride must be tuples");
    std::uint32_t dims = 0, stride_dims = 0;
    const std::uint32_t* size = tree_.items(sizes_node, dims);
    const std::uint32_t* stride = tree_.items(strides_node, stride_dims);
    fail_if(dims != stride_dims, "a tensor with ", dims, " sizes and ", stride_dims, " strides");
    fail_if(dims > limits_.dims, "a tensor with ", dims, " dimensions (at most ", limits_.dims,
            ")");
    fail_if(t.offset < 0, "a tensor with storage offset ", t.offset);
    const std::uint64_t element = info(t.dtype).size;
    bool empty = false;
    Wide numel = 1, last = static_cast<Wide>(t.offset);  // the last element's index
    for (std::uint32_t d = 0; d < dims; ++d) {
      fail_if(node(size[d]).kind != Kind::kInt || node(stride[d]).kind != Kind::kInt,
              "a tensor's sizes and strides must be ints");
      const auto sz = static_cast<std::int64_t>(node(size[d]).value);
      const auto st = static_cast<std::int64_t>(node(stride[d]).value);
      fail_if(sz < 0 || st < 0, "a tensor with size ", sz, " and stride ", st, " in dimension ",
              d);
      numel *= static_cast<Wide>(sz);
      fail_if(numel > static_cast<Wide>(std::numeric_limits<std::int64_t>::max()),
              "a tensor of more than 2^63 elements");
      empty = empty || sz == 0;
      if (sz > 0) last += static_cast<Wide>(sz - 1) * static_cast<Wide>(st);
    }
    // An empty tensor reads nothing; its offset may still not pass the storage's end.
    const Wide need = empty ? static_cast<Wide>(t.offset) * element : (last + 1) * element;
    fail_if(need > s.bytes, "a ", info(t.dtype).python, " tensor with storage offset ", t.offset,
            " and ", dims, " dimensions reaches byte ", static_cast<std::uint64_t>(
                std::min<Wide>(need, std::numeric_limits<std::uint64_t>::max())),
            " of storage ", shown(s.key), ", which has ", s.bytes);
  }

  void build() {
    const std::uint32_t state = pop();
    const std::uint32_t inst = top();
    // Python's weights-only unpickler builds tensors (legacy), parameters and OrderedDicts; of
    // those, torch.save writes only the last's BUILD (its attributes: module versions).
    fail_if(node(inst).kind != Kind::kDict || (node(inst).tag & kOrderedFlag) == 0,
            "BUILD of a ", kind_name(inst), "; only an OrderedDict's attributes are read");
    fail_if(node(state).kind != Kind::kDict, "an OrderedDict's attributes must be a dict, got a ",
            kind_name(state));
  }

  // ---- after STOP ---------------------------------------------------------------------------
  void finish(std::uint32_t root) {
    at_ = in_.size();
    tree_.root_ = root;
    // List and dict items, grouped by container in the order they were added.
    const std::size_t n = tree_.nodes_.size();
    tree_.list_start_.assign(n + 1, 0);
    for (const auto& e : edges_) ++tree_.list_start_[e.first + 1];
    for (std::size_t i = 0; i < n; ++i) tree_.list_start_[i + 1] += tree_.list_start_[i];
    tree_.list_items_.resize(edges_.size());
    {
      std::vector<std::uint32_t> next(tree_.list_start_.begin(), tree_.list_start_.end() - 1);
      for (const auto& e : edges_) tree_.list_items_[next[e.first]++] = e.second;
    }
    std::vector<std::pair<std::uint32_t, std::uint32_t>>().swap(edges_);
    for (const auto& [dict, what] : empty_dicts_) {
      fail_if(tree_.list_start_[dict + 1] != tree_.list_start_[dict], what,
              " must be an empty dict, got one with items");
    }
    walk(root);
  }

  // One walk from the root with an explicit stack: cycles, depth, the written-out size, dict
  // keys, typed lists; the reachable nodes in post-order.
  void walk(std::uint32_t root) {
    enum : std::uint8_t { kNew, kOpen, kDone };
    std::vector<std::uint8_t> state(tree_.nodes_.size(), kNew);
    std::vector<std::uint64_t> expanded(tree_.nodes_.size(), 1);
    const std::uint64_t limit = 16 * std::uint64_t{tree_.nodes_.size()} + limits_.expanded;
    struct Frame {
      std::uint32_t id, next;
    };
    std::vector<Frame> path;
    auto open = [&](std::uint32_t id) {
      const Kind k = node(id).kind;
      fail_if(k == Kind::kGlobal, "a global is left as a value; only REDUCE may use one");
      fail_if(k == Kind::kStorage, "a storage is left as a value outside a tensor");
      if (k != Kind::kTuple && k != Kind::kList && k != Kind::kDict) {
        state[id] = kDone;
        tree_.order_.push_back(id);
        return;
      }
      fail_if(path.size() >= limits_.depth, "containers nested more than ", limits_.depth,
              " deep");
      state[id] = kOpen;
      path.push_back({id, 0});
      check_items(id);
    };
    open(root);
    while (!path.empty()) {
      Frame& f = path.back();
      std::uint32_t count = 0;
      const std::uint32_t* items = tree_.items(f.id, count);
      if (f.next < count) {
        const std::uint32_t child = items[f.next++];
        fail_if(state[child] == kOpen, "a ", kind_name(child),
                " that contains itself (a cycle through the memo)");
        if (state[child] == kNew) open(child);
        continue;
      }
      std::uint64_t total = 1;
      for (std::uint32_t i = 0; i < count; ++i) {
        total = std::min(limit + 1, total + expanded[items[i]]);
      }
      fail_if(total > limit, "shared values make a tree of more than ", limit,
              " values written out, from ", tree_.nodes_.size(), " in the pickle");
      expanded[f.id] = total;
      state[f.id] = kDone;
      tree_.order_.push_back(f.id);
      path.pop_back();
    }
  }

  void check_items(std::uint32_t id) const {
    const Node& c = node(id);
    std::uint32_t count = 0;
    const std::uint32_t* items = tree_.items(id, count);
    if (c.kind == Kind::kList && c.tag != 0) {
      const auto want = static_cast<Kind>(c.tag);
      for (std::uint32_t i = 0; i < count; ++i) {
        fail_if(node(items[i]).kind != want, "a typed list of ", kind_name_of(want),
                " holds a ", kind_name(items[i]));
      }
    }
    if (c.kind != Kind::kDict) return;
    for (std::uint32_t i = 0; i < count; i += 2) {
      const Kind k = node(items[i]).kind;
      fail_if(k != Kind::kString && k != Kind::kInt, "a dict key that is a ", kind_name(items[i]),
              "; keys must be strs or ints (LibTorch's dicts cannot hash tuples)");
    }
  }
  static const char* kind_name_of(Kind k) {
    return k == Kind::kInt ? "int" : k == Kind::kFloat ? "float" : k == Kind::kBool ? "bool"
                                                                                   : "tensor";
  }

  std::string_view in_;
  const std::string& where_;
  const Limits limits_;
  std::size_t pos_ = 0, at_ = 0;
  Tree tree_;
  std::vector<std::uint32_t> stack_;
  std::vector<std::size_t> marks_;
  std::vector<std::uint32_t> memo_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges_;  // list/dict, item
  std::vector<std::pair<std::uint32_t, const char*>> empty_dicts_;
  // Ordered maps: the file chooses the keys, and a hash table's worst case would be its to pick.
  std::map<std::string_view, std::size_t> storage_of_key_;
  std::vector<std::uint32_t> storage_nodes_;
  std::map<std::uint64_t, std::uint32_t> rebuilt_;  // (args, global) -> tensor node
};

Tree read(std::string_view pickle, const std::string& where, const Limits& limits) {
  return Reader(pickle, where, limits).run();
}

}  // namespace mixprec::detail::pickle
