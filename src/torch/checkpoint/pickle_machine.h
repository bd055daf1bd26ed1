// Internal: the restricted unpickler's state (pickle_reader.h's read()), shared by its two
// halves: pickle_reader.cpp, the opcodes, the memo and the checks after STOP, and
// pickle_globals.cpp, the globals, storages and tensors a state dict may hold (Note [Restricted
// unpickler] in pickle_reader.cpp).
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "torch/checkpoint/pickle_reader.h"

namespace mixprec::detail::pickle {

// The globals a state dict needs (Note [Restricted unpickler]).
enum class Global : std::uint8_t {
  kOrderedDict, kRebuildTensor, kRebuildTensorV2, kRebuildTensorV3, kRebuildParameter,
  kRebuildParameterWithState, kRestoreTypeTag, kBuildIntList, kBuildDoubleList, kBuildBoolList,
  kBuildTensorList, kStorageType, kDtype
};

// Node::tag of a dict that collections.OrderedDict() made.
constexpr std::uint8_t kOrderedFlag = 1;

// An opcode's name ("BINPUT"), for messages.
std::string op_name(unsigned char code);
// Text from the file, for a message: at most 64 bytes, other than printable ASCII escaped.
std::string shown(std::string_view text);

class Reader {
 public:
  Reader(std::string_view pickle, const std::string& where, const Limits& limits)
      : in_(pickle), where_(where), limits_(limits) {
    tree_.pickle_ = pickle;
  }

  Tree run();

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

  // ---- opcodes (pickle_reader.cpp) ---------------------------------------------------------
  void step(unsigned char code);
  void long1();
  void string(std::uint64_t size);
  void put(std::uint64_t index);
  void get(std::uint64_t index);

  // ---- globals, storages and tensors (pickle_globals.cpp) --------------------------------
  std::uint32_t global(std::string_view module, std::string_view name);
  std::uint32_t add_global(Global g, int dtype = 0);
  std::uint32_t persistent_id(std::uint32_t pid);
  void reduce();
  Kind type_of_tag(std::string_view type) const;
  std::uint32_t tag_list(std::uint32_t value, Kind items);
  std::uint32_t rebuild(Global g, const std::uint32_t* a, std::uint32_t n);
  void must_be_empty(std::uint32_t dict, const char* what);
  void check_extent(const Tensor& t, const Storage& s);
  void build();

  // ---- after STOP (pickle_reader.cpp) -----------------------------------------------------
  void finish(std::uint32_t root);
  void walk(std::uint32_t root);
  void check_items(std::uint32_t id) const;
  static const char* kind_name_of(Kind k);

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

}  // namespace mixprec::detail::pickle
