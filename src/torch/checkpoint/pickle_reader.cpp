// mixprec's restricted unpickler (pickle_reader.h): the opcodes of torch.save's state dicts, the
// memo, every count and reference checked, and after STOP one walk of the result, a flat tree of
// nodes that is destroyed without recursion. The globals, storages and tensors it may hold are
// pickle_globals.cpp's.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "torch/checkpoint/pickle_machine.h"

namespace mixprec::detail::pickle {

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

namespace {

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

std::string op_name(unsigned char code) {
  for (const Op& op : kOpNames) {
    if (op.code == code) return op.name;
  }
  return "an unknown opcode";
}

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

Tree Reader::run() {
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

void Reader::step(unsigned char code) {
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

void Reader::long1() {
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

void Reader::string(std::uint64_t size) {
  const std::uint64_t offset = pos_;
  const std::string_view s = take(size);
  fail_if(size > std::numeric_limits<std::uint32_t>::max(), "a str of ", size, " bytes");
  fail_if(!is_utf8(s), "a str that is not UTF-8: ", shown(s));
  push(add(Kind::kString, offset, static_cast<std::uint32_t>(size)));
}

void Reader::put(std::uint64_t index) {
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

void Reader::get(std::uint64_t index) {
  fail_if(index >= memo_.size(), "a memo GET of index ", index, ", of ", memo_.size(),
          " entries");
  push(memo_[static_cast<std::size_t>(index)]);
}

// ---- after STOP ---------------------------------------------------------------------------
void Reader::finish(std::uint32_t root) {
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
void Reader::walk(std::uint32_t root) {
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

void Reader::check_items(std::uint32_t id) const {
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

const char* Reader::kind_name_of(Kind k) {
  return k == Kind::kInt ? "int" : k == Kind::kFloat ? "float" : k == Kind::kBool ? "bool"
                                                                                 : "tensor";
}

Tree read(std::string_view pickle, const std::string& where, const Limits& limits) {
  return Reader(pickle, where, limits).run();
}

}  // namespace mixprec::detail::pickle
