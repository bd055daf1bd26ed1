// The opcode walk behind detail::plain_dicts (src/torch/checkpoint/python_pickle.h): copies a pickle,
// turning Python's OrderedDicts into plain dicts for LibTorch's unpickler.
#include "torch/checkpoint/python_pickle.h"

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::detail {
namespace {

// How an opcode's argument is laid out after the opcode byte.
enum class Arg { kNone, kFixed, kLine, kTwoLines, kCounted };
// What it does to the stack: pops `pops` values (or everything down to the last MARK when
// `to_mark`), then pushes one value when `pushes`.
struct Op {
  Arg arg = Arg::kNone;
  int size = 0;  // kFixed: bytes; kCounted: bytes of the little-endian length before the data
  int pops = 0;
  bool to_mark = false;
  bool pushes = false;
};

// What the walk knows of a stack value: the OrderedDict class (not written out), the empty
// argument tuple that follows it (not written out), a dict made from them, another container
// (tuple, list, dict, set: no dict key), or anything else.
enum class Kind { kOther, kOrderedDictClass, kEmptyArgs, kDict, kContainer };

// The opcodes that push a tuple, list, dict or set.
bool makes_container(char code) {
  switch (code) {
    case ')': case ']': case '}': case 't': case 'l': case 'd': case '\x85': case '\x86':
    case '\x87': case '\x8f': case '\x91':
      return true;
    default:
      return false;
  }
}

constexpr char kMark = '(', kEmptyTuple = ')', kEmptyDict = '}', kSetItem = 's', kSetItems = 'u',
               kAppend = 'a', kAppends = 'e',
               kReduce = 'R',
               kBuild = 'b', kGlobal = 'c', kFrame = '\x95', kStop = '.';

// Pickle protocols 0 to 5, as CPython's pickletools lists them.
std::map<char, Op> make_table() {
  const Op push{Arg::kNone, 0, 0, false, true};
  auto fixed = [](int n, bool pushes) { return Op{Arg::kFixed, n, 0, false, pushes}; };
  auto counted = [](int n) { return Op{Arg::kCounted, n, 0, false, true}; };
  auto pop = [](int n, bool pushes) { return Op{Arg::kNone, 0, n, false, pushes}; };
  const Op line_push{Arg::kLine, 0, 0, false, true};
  const Op to_mark{Arg::kNone, 0, 0, true, false};
  const Op to_mark_push{Arg::kNone, 0, 0, true, true};
  return {
      {'(', Op{}},  // MARK: handled by the walk
      {')', push}, {'}', push}, {']', push}, {'\x8f', push}, {'N', push}, {'\x88', push},
      {'\x89', push}, {'\x97', push},  // NEXT_BUFFER
      {'I', line_push}, {'L', line_push}, {'F', line_push}, {'S', line_push},
      {'V', line_push}, {'P', line_push}, {'g', line_push},  // GET
      {'J', fixed(4, true)}, {'K', fixed(1, true)}, {'M', fixed(2, true)},
      {'G', fixed(8, true)}, {'h', fixed(1, true)}, {'j', fixed(4, true)},  // BINGET
      {'\x82', fixed(1, true)}, {'\x83', fixed(2, true)}, {'\x84', fixed(4, true)},  // EXT
      {'\x8a', counted(1)}, {'\x8b', counted(4)}, {'T', counted(4)}, {'U', counted(1)},
      {'X', counted(4)}, {'\x8c', counted(1)}, {'\x8d', counted(8)}, {'B', counted(4)},
      {'C', counted(1)}, {'\x8e', counted(8)}, {'\x96', counted(8)},
      {'0', pop(1, false)}, {'a', pop(1, false)}, {'s', pop(2, false)},
      {'b', pop(1, false)},  // BUILD: the state; the object stays
      {'\x85', pop(1, true)}, {'\x86', pop(2, true)}, {'\x87', pop(3, true)},
      {'Q', pop(1, true)}, {'\x98', pop(1, true)}, {'R', pop(2, true)}, {'\x81', pop(2, true)},
      {'\x92', pop(3, true)}, {'\x93', pop(2, true)},  // NEWOBJ_EX, STACK_GLOBAL
      {'1', to_mark}, {'e', to_mark}, {'u', to_mark}, {'\x90', to_mark},
      {'l', to_mark_push}, {'t', to_mark_push}, {'d', to_mark_push}, {'\x91', to_mark_push},
      {'o', to_mark_push}, {'i', Op{Arg::kTwoLines, 0, 0, true, true}},  // INST
      {'c', Op{Arg::kTwoLines, 0, 0, false, true}},                       // GLOBAL
      {'2', Op{}}, {'p', Op{Arg::kLine}}, {'q', Op{Arg::kFixed, 1}},      // DUP, PUT, BINPUT
      {'r', Op{Arg::kFixed, 4}}, {'\x94', Op{}},                          // LONG_BINPUT, MEMOIZE
      {'\x80', Op{Arg::kFixed, 1}}, {kFrame, Op{Arg::kFixed, 8}}, {kStop, Op{}},
  };
}

// A stack value: what the walk knows of it, and where its bytes start in the output.
struct Value {
  Kind kind;
  std::size_t start;
};

std::string binunicode(const std::string& text) {
  std::string out(1, 'X');
  for (int i = 0; i < 4; ++i) out += static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return out + text;
}

class Walk {
 public:
  explicit Walk(const std::string& in) : in_(in) {}

  std::string run() {
    static const std::map<char, Op> table = make_table();
    while (true) {
      TORCH_CHECK(pos_ < in_.size(), "mixprec: the pickle ends before its STOP opcode");
      const std::size_t start = pos_;
      const char code = in_[pos_++];
      const auto found = table.find(code);
      TORCH_CHECK(found != table.end(), "mixprec: unknown pickle opcode ",
                  static_cast<int>(static_cast<unsigned char>(code)), " at byte ", start);
      const Op& op = found->second;
      const std::string arg = read_arg(op);
      if (code == kStop) {
        for (std::size_t i = 0; i < stack_.size(); ++i) check_plain(i);
        out_ += code;
        return out_;
      }
      if (!special(code, arg)) {
        const std::size_t out_start = out_.size();
        if (code != kFrame) out_.append(in_, start, pos_ - start);
        apply(op, code, arg, out_start);
      }
    }
  }

 private:
  // The opcodes that involve an OrderedDict; returns false for every other case.
  bool special(char code, const std::string& arg) {
    if (code == kGlobal && arg == "collections\nOrderedDict\n") {
      stack_.push_back({Kind::kOrderedDictClass, out_.size()});
      return true;
    }
    const bool put = code == 'p' || code == 'q' || code == 'r';
    const bool get = code == 'g' || code == 'h' || code == 'j';
    // Python numbers its memo entries 0, 1, 2, ... in order; LibTorch's unpickler sizes its memo
    // table by the index it reads, so one PUT of 4e9 asks it for gigabytes. A PUT past the
    // entries so far, or a GET of one not yet made, is refused.
    if (put || code == '\x94') {
      if (put) {
        TORCH_CHECK(memo_index(code, arg) <= memo_count_, "mixprec: a pickle memo PUT at index ",
                    memo_index(code, arg), " after ", memo_count_,
                    " entries (Python numbers them in order)");
      }
      ++memo_count_;
    }
    if (get) {
      TORCH_CHECK(memo_index(code, arg) < memo_count_, "mixprec: a pickle memo GET of index ",
                  memo_index(code, arg), ", of ", memo_count_, " entries");
    }
    if (put && top_is(Kind::kOrderedDictClass)) {
      class_memo_.insert(memo_index(code, arg));  // the class is not written out, nor memoized
      return true;
    }
    if (get && class_memo_.count(memo_index(code, arg))) {
      stack_.push_back({Kind::kOrderedDictClass, out_.size()});
      return true;
    }
    if (get && container_memo_.count(memo_index(code, arg))) {
      out_.append(in_, pos_ - arg.size() - 1, arg.size() + 1);  // copied as it is
      stack_.push_back({Kind::kContainer, out_.size() - arg.size() - 1});
      return true;
    }
    if (code == kEmptyTuple && top_is(Kind::kOrderedDictClass)) {
      stack_.push_back({Kind::kEmptyArgs, out_.size()});
      return true;
    }
    if (code == kReduce && stack_.size() >= 2 && below_top() == Kind::kOrderedDictClass &&
        top_is(Kind::kEmptyArgs)) {
      stack_.resize(stack_.size() - 2);
      stack_.push_back({Kind::kDict, out_.size()});
      out_ += kEmptyDict;
      return true;
    }
    if (code == kBuild && stack_.size() >= 2 && below_top() == Kind::kDict) {
      // dict, state -> dict, MARK, key, state, SETITEMS (LibTorch's unpickler has no POP): the
      // attributes go under kDroppedStateKey, which the caller removes.
      check_plain(stack_.size() - 1);
      out_.insert(stack_.back().start, kMark + binunicode(kDroppedStateKey));
      stack_.pop_back();
      out_ += kSetItems;
      return true;
    }
    if (code == kAppend && stack_.size() >= 2) {
      // list, value, APPEND -> list, MARK, value, APPENDS: LibTorch 1.13's unpickler lacks
      // APPEND too (Python writes it for a list of one item).
      check_plain(stack_.size() - 1);
      out_.insert(stack_.back().start, 1, kMark);
      stack_.pop_back();
      out_ += kAppends;
      return true;
    }
    if (code == kSetItem && stack_.size() >= 3) {
      // dict, key, value, SETITEM -> dict, MARK, key, value, SETITEMS: LibTorch 1.13's
      // unpickler has no SETITEM, which Python writes for a dict of one item.
      check_plain(stack_.size() - 1);
      check_plain(stack_.size() - 2);
      check_key(stack_.size() - 2);
      out_.insert(stack_[stack_.size() - 2].start, 1, kMark);
      stack_.resize(stack_.size() - 2);
      out_ += kSetItems;
      return true;
    }
    return false;
  }

  void apply(const Op& op, char code, const std::string& arg, std::size_t out_start) {
    if (code == kMark) {
      marks_.push_back({stack_.size(), out_start});
      return;
    }
    if (code == '2') {  // DUP
      TORCH_CHECK(!stack_.empty(), "mixprec: pickle DUP on an empty stack");
      check_plain(stack_.size() - 1);
      stack_.push_back({stack_.back().kind, out_start});
      return;
    }
    if (code == 'p' || code == 'q' || code == 'r' || code == '\x94') {  // PUT, MEMOIZE
      TORCH_CHECK(!stack_.empty(), "mixprec: pickle PUT on an empty stack");
      check_plain(stack_.size() - 1);
      const std::uint64_t index = code == '\x94' ? memo_count_ - 1 : memo_index(code, arg);
      class_memo_.erase(index);
      if (stack_.back().kind == Kind::kContainer || stack_.back().kind == Kind::kDict) {
        container_memo_.insert(index);
      } else {
        container_memo_.erase(index);
      }
      return;
    }
    std::size_t keep = 0, start = out_start;
    if (op.to_mark) {
      TORCH_CHECK(!marks_.empty(), "mixprec: pickle opcode without its MARK");
      keep = marks_.back().first;
      start = marks_.back().second;
      marks_.pop_back();
    } else {
      TORCH_CHECK(stack_.size() >= static_cast<std::size_t>(op.pops),
                  "mixprec: pickle opcode on a stack too short");
      keep = stack_.size() - op.pops;
      if (op.pops > 0) start = stack_[keep].start;
    }
    for (std::size_t i = keep; i < stack_.size(); ++i) check_plain(i);
    // LibTorch's unpickler does not check its stack: these opcodes change the value below their
    // arguments (a list, a dict, an object), which must be there, and a dict takes pairs. Else it
    // reads outside its stack (found by tests/fuzz: a bad free on LibTorch 1.13).
    const bool into_below = code == kAppend || code == kSetItem || code == kBuild ||
                            code == kAppends || code == kSetItems || code == '\x90';
    TORCH_CHECK(!into_below || keep >= 1, "mixprec: pickle opcode ", static_cast<int>(code),
                " with nothing below its arguments to apply to");
    if (code == kSetItems || code == 'd') {  // keys and values from the MARK on
      TORCH_CHECK((stack_.size() - keep) % 2 == 0,
                  "mixprec: a pickle dict with a key and no value");
      for (std::size_t i = keep; i + 1 < stack_.size(); i += 2) check_key(i);
    }
    stack_.resize(keep);
    if (op.pushes) stack_.push_back({makes_container(code) ? Kind::kContainer : Kind::kOther, start});
  }

  // LibTorch's unpickler cannot hash a tuple, list, dict or set, and its dicts call the hash
  // where no exception may pass: such a key ends the process (std::terminate, "Can't hash
  // IValues with tag 'Tuple'"). Python's state dicts have string and integer keys.
  void check_key(std::size_t i) const {
    TORCH_CHECK(stack_[i].kind != Kind::kContainer && stack_[i].kind != Kind::kDict,
                "mixprec: a pickle dict has a tuple, list, dict or set as a key, which LibTorch's "
                "unpickler cannot hash");
  }

  // An OrderedDict class or its argument tuple used other than as `OrderedDict()`.
  void check_plain(std::size_t i) const {
    TORCH_CHECK(stack_[i].kind != Kind::kOrderedDictClass && stack_[i].kind != Kind::kEmptyArgs,
                "mixprec: this pickle builds a collections.OrderedDict in a way mixprec does "
                "not read (only OrderedDict() with items, as torch.save writes it)");
  }

  bool top_is(Kind kind) const { return !stack_.empty() && stack_.back().kind == kind; }
  Kind below_top() const { return stack_[stack_.size() - 2].kind; }

  // The memo index of a PUT/GET: decimal text (PUT, GET), 1 byte (BINPUT, BINGET) or 4 bytes
  // little-endian (LONG_BINPUT, LONG_BINGET).
  static std::uint64_t memo_index(char code, const std::string& arg) {
    if (code == 'p' || code == 'g') {
      const std::string digits = arg.substr(0, arg.size() - 1);
      TORCH_CHECK(!digits.empty() && digits.size() <= 18 &&
                      digits.find_first_not_of("0123456789") == std::string::npos,
                  "mixprec: a pickle PUT/GET with the index '", digits, "'");
      return std::stoull(digits);
    }
    std::uint64_t index = 0;
    for (std::size_t i = arg.size(); i-- > 0;) {
      index = (index << 8) | static_cast<unsigned char>(arg[i]);
    }
    return index;
  }

  std::string read_arg(const Op& op) {
    const std::size_t start = pos_;
    switch (op.arg) {
      case Arg::kNone:
        break;
      case Arg::kFixed:
        skip(op.size);
        break;
      case Arg::kLine:
        skip_line();
        break;
      case Arg::kTwoLines:
        skip_line();
        skip_line();
        break;
      case Arg::kCounted: {
        skip(op.size);
        std::uint64_t length = 0;
        for (int i = op.size - 1; i >= 0; --i) {
          length = (length << 8) | static_cast<unsigned char>(in_[start + i]);
        }
        TORCH_CHECK(length <= in_.size() - pos_, "mixprec: the pickle is truncated");
        skip(static_cast<std::size_t>(length));
        break;
      }
    }
    return in_.substr(start, pos_ - start);
  }
  void skip(std::size_t n) {
    TORCH_CHECK(n <= in_.size() - pos_, "mixprec: the pickle is truncated");
    pos_ += n;
  }
  void skip_line() {
    const std::size_t end = in_.find('\n', pos_);
    TORCH_CHECK(end != std::string::npos, "mixprec: the pickle is truncated");
    pos_ = end + 1;
  }

  const std::string& in_;
  std::size_t pos_ = 0;
  std::string out_;
  std::vector<Value> stack_;
  std::vector<std::pair<std::size_t, std::size_t>> marks_;  // stack size, output offset
  std::set<std::uint64_t> class_memo_;  // the memo entries that hold the OrderedDict class
  std::set<std::uint64_t> container_memo_;  // the memo entries that hold a container
  std::uint64_t memo_count_ = 0;             // memo entries made so far (PUTs and MEMOIZEs)
};

}  // namespace

std::string plain_dicts(const std::string& pickle) {
  return Walk(pickle).run();
}

}  // namespace mixprec::detail
