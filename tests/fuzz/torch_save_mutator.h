// The custom mutator of the structure-aware torch.save targets: one small edit of the pickle
// (opcode-aware) or of the records per call, on the container of torch_save_input.h, so that the
// written archive stays valid and the edits reach storages, tensors, the memo and nesting.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fuzz/pickle_ops.h"
#include "fuzz/torch_save_input.h"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace mixprec::fuzz {

using Rng = std::minstd_rand;  // seeded by libFuzzer for each call: runs repeat

template <typename T, std::size_t N>
const T& pick(Rng& rng, const T (&items)[N]) {
  return items[rng() % N];
}
inline std::size_t below(Rng& rng, std::size_t n) { return n == 0 ? 0 : rng() % n; }

class Mutator {
 public:
  Mutator(Input& in, unsigned seed) : in_(in), rng_(seed) {}

  /// One edit of the input; false when it had nothing to edit (the caller mutates bytes).
  bool run() {
    for (std::size_t i = 0; i < in_.records.size(); ++i) {
      const std::string& name = in_.records[i].first;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".pkl") == 0 && rng_() % 5 == 0) {
        target_record_ = static_cast<int>(i);  // TorchScript archives: constants.pkl too
      }
    }
    ops_ = split(target());
    storages_ = find_storages(ops_);
    bool edited = false;  // ops_ changed, to be written back
    bool done = false;    // the records or the header changed
    // clang-format off
    switch (rng_() % 20) {
      case 0: case 1: case 2: case 3: edited = mutate_int(); break;
      case 4: case 5: case 6: edited = replace_leaf(value()); break;
      case 7: edited = replace_leaf(tensor()); break;
      case 8: edited = replace_leaf(nested()); break;
      case 9: edited = insert_op(); break;
      case 10: edited = delete_or_copy(); break;
      case 11: edited = swap_global(); break;
      case 12: edited = shared_reference(); break;
      case 13: edited = mutate_string(); break;
      case 14: case 15: done = fix_records(); break;
      case 16: edited = fix_count(); break;
      case 17: done = mutate_record(); break;
      case 18: done = mutate_header(); break;
      default: done = mutate_pickle_bytes(); break;
    }
    // clang-format on
    if (!edited) return done;
    target() = join(ops_);
    if (target_record_ < 0 && rng_() % 4 == 0) {  // and the records made to fit the new pickle
      storages_ = find_storages(ops_);
      fix_records();
    }
    return true;
  }

 private:
  // ---- values -------------------------------------------------------------------------------
  std::int64_t interesting_int() {
    if (rng_() % 3 == 0 && !in_.records.empty()) {  // sizes near a record's
      const auto& r = in_.records[below(rng_, in_.records.size())].second;
      const std::int64_t sizes[] = {1, 2, 4, 8};
      const std::int64_t n = static_cast<std::int64_t>(r.size()) / pick(rng_, sizes);
      return n + static_cast<std::int64_t>(rng_() % 3) - 1;
    }
    return pick(rng_, kInts);
  }
  std::string record_key() {
    std::vector<std::string> keys;
    for (const auto& r : in_.records) {
      if (r.first.rfind("data/", 0) == 0) keys.push_back(r.first.substr(5));
    }
    if (keys.empty() || rng_() % 4 == 0) return std::to_string(rng_() % 8);
    return keys[below(rng_, keys.size())];
  }
  std::string value() {
    // clang-format off
    switch (rng_() % 8) {
      case 0: return int_op(interesting_int());
      case 1: return str_op(rng_() % 2 ? pick(rng_, kStrings) : record_key());
      case 2: return float_op(pick(rng_, kDoubles));
      case 3: { const char* ks[] = {"N", "\x88", "\x89", ")", "]", "}"}; return pick(rng_, ks); }
      case 4: return dict();
      case 5: return typed_list();
      case 6: return str_op(std::string(rng_() % 2 ? 255 : 300, 'x'));
      default: {
        const std::uint64_t memo = memo_size(ops_, ops_.size());
        return memo > 0 ? memo_op(false, below(rng_, memo + 1)) : std::string("N");
      }
    }
    // clang-format on
  }
  std::string storage_class() {
    if (!storages_.empty() && rng_() % 2 == 0) return storages_[below(rng_, storages_.size())].cls;
    return pick(rng_, kStorageClasses);
  }
  // A tensor as torch.save writes one (v1, v2, v3 with a dtype, a parameter), on a storage of
  // this pickle (shared) or on a new one whose record is added, mostly large enough to hold it.
  std::string tensor() {
    const int version = static_cast<int>(rng_() % 4);  // 0: v1, 1: v2, 2: v3, 3: parameter
    const std::size_t dtype = below(rng_, sizeof(kDtypes) / sizeof(kDtypes[0]));
    const int dims = static_cast<int>(rng_() % 4);
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(dims)), strides(sizes.size());
    for (auto& size : sizes)
      size = rng_() % 4 == 0 ? interesting_int() : static_cast<std::int64_t>(rng_() % 5);
    __extension__ typedef __int128 Wide;
    Wide stride = 1, last = 0;
    bool empty = false;
    for (int d = dims - 1; d >= 0; --d) {
      strides[d] = rng_() % 4 == 0 ? interesting_int() : static_cast<std::int64_t>(stride);
      stride *= std::max<std::int64_t>(sizes[d], 1);
      if (stride > INT64_MAX) stride = 1;
      empty = empty || sizes[d] == 0;
      const bool small =
          sizes[d] >= 0 && sizes[d] <= (1 << 20) && strides[d] >= 0 && strides[d] <= (1 << 20);
      last += small && sizes[d] > 0 ? static_cast<Wide>(sizes[d] - 1) * strides[d] : Wide{1} << 62;
    }
    const std::int64_t offset =
        rng_() % 3 == 0 ? interesting_int() : static_cast<std::int64_t>(rng_() % 3);
    const Wide needed = empty ? offset : offset + last + 1;
    std::string cls, key;
    std::int64_t count = 0;
    if (!storages_.empty() && rng_() % 2 == 0) {  // shares a storage
      const StorageRef& s = storages_[below(rng_, storages_.size())];
      cls = s.cls, key = s.key, count = s.count;
    } else {
      cls = version == 2 && rng_() % 2 ? std::string("UntypedStorage") : storage_class();
      key = record_key();
      const int element = cls == "UntypedStorage" ? kDtypeSizes[dtype] : 1;
      count =
          needed >= 0 && needed <= 1024 && rng_() % 4 != 0
              ? static_cast<std::int64_t>(needed) * element + static_cast<std::int64_t>(rng_() % 2)
              : interesting_int();
      if (count >= 0 && count <= 4096) set_record("data/" + key, count * element_size(cls));
    }
    std::string t = global_op("torch._utils", version == 0   ? "_rebuild_tensor"
                                              : version == 2 ? "_rebuild_tensor_v3"
                                                             : "_rebuild_tensor_v2");
    t += "((" + str_op("storage") + global_op("torch", cls) + str_op(key) + str_op("cpu") +
         int_op(count) + "tQ" + int_op(offset) + "(";
    for (const std::int64_t size : sizes) t += int_op(size);
    t += "t(";
    for (const std::int64_t st : strides) t += int_op(st);
    t += "t";
    if (version != 0) {
      t += rng_() % 2 ? "\x88" : "\x89";
      t += global_op("collections", "OrderedDict") + ")R";
      if (version == 2) t += global_op("torch", kDtypes[dtype]);
    }
    t += "tR";
    if (version == 3) {
      t = global_op("torch._utils", "_rebuild_parameter") + "(" + t + "\x88" +
          global_op("collections", "OrderedDict") + ")RtR";
    }
    return t;
  }
  // A value nested `depth` deep: one-tuples, or lists.
  std::string nested() {
    const int depth = pick(rng_, kDepths);
    const std::string leaf = rng_() % 2 ? value() : std::string("N");
    if (rng_() % 2) return leaf + std::string(static_cast<std::size_t>(depth), '\x85');
    return std::string(static_cast<std::size_t>(depth), ']') + leaf +
           std::string(static_cast<std::size_t>(depth), 'a');
  }
  // A dict with keys of every kind, or 64 int keys that share a slot in c10's hash table
  // (Note [Dict keys that LibTorch's hash table cannot hold]).
  std::string dict() {
    std::string d =
        rng_() % 3 ? std::string("}(") : global_op("collections", "OrderedDict") + ")R(";
    if (rng_() % 4 == 0) {
      std::uint64_t inv = 11400714819323198485ull;  // inverse of the Fibonacci multiplier
      for (int i = 0; i < 5; ++i) inv *= 2 - 11400714819323198485ull * inv;
      const unsigned shift = 20 + rng_() % 32;
      for (std::uint64_t j = 0; j < 64; ++j)
        d += int_op(static_cast<std::int64_t>((j << shift) * inv)) + "N";
      return d + "u";
    }
    const char* keys[] = {"N", "\x88", "K\x01\x85", ")", "]", "}"};
    for (unsigned n = rng_() % 4; n-- > 0;) {
      // clang-format off
      switch (rng_() % 4) {
        case 0: d += int_op(interesting_int()); break;
        case 1: d += str_op(pick(rng_, kStrings)); break;
        case 2: d += pick(rng_, keys); break;
        default: d += float_op(pick(rng_, kDoubles)); break;
      }
      // clang-format on
      d += value();
    }
    return d + "u";
  }
  std::string typed_list() {
    const char* builders[] = {"build_intlist", "build_doublelist", "build_boollist",
                              "build_tensorlist"};
    std::string items;
    for (unsigned n = rng_() % 4; n-- > 0;)
      items += rng_() % 2 ? int_op(interesting_int()) : float_op(1.0);
    if (rng_() % 2) {
      const char* tags[] = {"List[int]", "List[float]", "List[bool]", "List[Tensor]",
                            "Dict[str, Any]"};
      return global_op("torch.jit._pickle", "restore_type_tag") + "](" + items + "e" +
             str_op(pick(rng_, tags)) + "\x86R";
    }
    return global_op("torch.jit._pickle", pick(rng_, builders)) + "(](" + items + "etR";
  }

  // ---- pickle edits ---------------------------------------------------------------------------
  template <typename Pred>
  int find_op(Pred pred) {
    std::vector<int> at;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      if (pred(ops_[i])) at.push_back(static_cast<int>(i));
    }
    return at.empty() ? -1 : at[below(rng_, at.size())];
  }
  bool mutate_int() {
    const int i = find_op([](const std::string& op) { return int_of(op).has_value(); });
    if (i < 0) return false;
    const std::int64_t old = *int_of(ops_[i]);
    std::int64_t v = interesting_int();
    if (rng_() % 4 == 0)
      v = static_cast<std::int64_t>(static_cast<std::uint64_t>(old) + rng_() % 5 - 2);
    if (is_memo(ops_[i])) {
      if (rng_() % 2) v = static_cast<std::int64_t>(below(rng_, memo_size(ops_, ops_.size()) + 2));
      ops_[i] =
          memo_op(code(ops_[i]) == 'q' || code(ops_[i]) == 'r', static_cast<std::uint32_t>(v));
    } else {
      ops_[i] = int_op(v);
    }
    return true;
  }
  bool replace_leaf(const std::string& with) {
    const int i = find_op(is_leaf);
    if (i < 0) return false;
    ops_[i] = with;
    return true;
  }
  std::size_t position() {  // before the STOP, if there is one
    const std::size_t n = ops_.size();
    return n > 0 && code(ops_.back()) == '.' ? below(rng_, n) : below(rng_, n + 1);
  }
  bool insert_op() {
    const std::string op = rng_() % 3 ? std::string(pick(rng_, kOps)) : raw_op(rng_);
    ops_.insert(ops_.begin() + static_cast<std::ptrdiff_t>(position()), op);
    return true;
  }
  bool delete_or_copy() {
    if (ops_.empty()) return false;
    const std::size_t from = below(rng_, ops_.size());
    const std::size_t to = std::min(ops_.size(), from + 1 + (rng_() % 4 == 0 ? rng_() % 16 : 0));
    if (rng_() % 2) {
      ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(from),
                 ops_.begin() + static_cast<std::ptrdiff_t>(to));
    } else {
      const std::vector<std::string> copy(ops_.begin() + static_cast<std::ptrdiff_t>(from),
                                          ops_.begin() + static_cast<std::ptrdiff_t>(to));
      ops_.insert(ops_.begin() + static_cast<std::ptrdiff_t>(position()), copy.begin(), copy.end());
    }
    return true;
  }
  bool swap_global() {
    const int i = find_op([](const std::string& op) { return code(op) == 'c'; });
    if (i < 0) return false;
    switch (rng_() % 4) {
      case 0:
        ops_[i] = global_op("torch", pick(rng_, kStorageClasses));
        break;
      case 1:
        ops_[i] = global_op("torch", pick(rng_, kDtypes));
        break;
      case 2: {  // the same global as STACK_GLOBAL (protocol 4)
        const std::size_t nl = ops_[i].find('\n');
        const std::string module = ops_[i].substr(1, nl - 1);
        const std::string name = ops_[i].substr(nl + 1, ops_[i].size() - nl - 2);
        ops_[i] = str_op(module) + str_op(name) + "\x93";
        break;
      }
      default: {
        const auto& g = pick(rng_, kGlobals);
        ops_[i] = global_op(g[0], g[1]);
      }
    }
    return true;
  }
  // A PUT after one value and a GET of it in place of a later leaf: shared values, and cycles
  // where the GET lands inside the container it names.
  bool shared_reference() {
    if (ops_.size() < 2) return false;
    const std::size_t after = below(rng_, ops_.size() - 1);
    const std::uint64_t index =
        rng_() % 8 == 0 ? pick(rng_, kInts) & 0xffffffff : memo_size(ops_, after + 1);
    const std::string put = rng_() % 4 == 0 ? std::string("\x94") : memo_op(true, index);
    ops_.insert(ops_.begin() + static_cast<std::ptrdiff_t>(after + 1), put);
    std::vector<int> leaves;
    for (std::size_t i = after + 2; i < ops_.size(); ++i) {
      if (is_leaf(ops_[i])) leaves.push_back(static_cast<int>(i));
    }
    if (!leaves.empty()) ops_[leaves[below(rng_, leaves.size())]] = memo_op(false, index);
    return true;
  }
  bool mutate_string() {
    const int i = find_op([](const std::string& op) { return str_of(op).has_value(); });
    if (i < 0) return false;
    std::string s = *str_of(ops_[i]);
    switch (rng_() % 3) {
      case 0:
        s = pick(rng_, kStrings);
        break;
      case 1:
        s = record_key();
        break;
      default: {
        s.resize(s.size() * 2 + 8);
        s.resize(
            LLVMFuzzerMutate(reinterpret_cast<std::uint8_t*>(&s[0]), s.size() / 2 - 4, s.size()));
      }
    }
    ops_[i] = code(ops_[i]) == 0x8c && s.size() < 256 ? "\x8c" + little_bytes(s.size(), 1) + s
                                                      : str_op(s);
    return true;
  }
  std::string& target() {
    return target_record_ < 0 ? in_.pickle
                              : in_.records[static_cast<std::size_t>(target_record_)].second;
  }
  bool mutate_pickle_bytes() {
    std::string& p = target();
    const std::size_t size = p.size();
    p.resize(size * 2 + 64);
    p.resize(LLVMFuzzerMutate(reinterpret_cast<std::uint8_t*>(&p[0]), size, p.size()));
    return true;
  }

  // ---- records --------------------------------------------------------------------------------
  void set_record(const std::string& name, std::int64_t size) {
    for (auto& [n, bytes] : in_.records) {
      if (n == name) {
        bytes.resize(static_cast<std::size_t>(size), static_cast<char>(rng_()));
        return;
      }
    }
    if (in_.records.size() < kMaxRecords) {
      in_.records.emplace_back(
          name, std::string(static_cast<std::size_t>(size), static_cast<char>(rng_())));
    }
  }
  // Every storage's record made exactly count x element bytes, where that is small: the loads
  // then reach the tensors instead of stopping at the size check.
  bool fix_records() {
    bool any = false;
    for (const StorageRef& s : storages_) {
      if (s.count < 0 || s.count > 1024) continue;
      set_record("data/" + s.key, s.count * element_size(s.cls));
      any = true;
    }
    return any;
  }
  // A storage's count made to fit its record (or to miss it by one element).
  bool fix_count() {
    if (storages_.empty()) return false;
    const StorageRef& s = storages_[below(rng_, storages_.size())];
    if (s.count_op < 0) return false;
    for (const auto& [name, bytes] : in_.records) {
      if (name == "data/" + s.key) {
        const std::int64_t fits = static_cast<std::int64_t>(bytes.size()) / element_size(s.cls);
        ops_[static_cast<std::size_t>(s.count_op)] = int_op(fits + (rng_() % 4 == 0 ? 1 : 0));
        return true;
      }
    }
    return false;
  }
  bool mutate_record() {
    auto& records = in_.records;
    switch (rng_() % 6) {
      case 0: {  // byteorder
        const char* orders[] = {"little", "big", "", "middle", "big\n"};
        set_record("byteorder", 0);
        for (auto& [name, bytes] : records) {
          if (name == "byteorder") bytes = pick(rng_, orders);
        }
        return true;
      }
      case 1: {  // the format version
        const char* versions[] = {"3\n", "0\n", "10\n", "99999999999\n", "x", "", "-1\n"};
        const char* names[] = {"version", ".data/version"};
        set_record(pick(rng_, names), 0);
        for (auto& [name, bytes] : records) {
          if (name == "version" || name == ".data/version") bytes = pick(rng_, versions);
        }
        return true;
      }
      case 2:  // one fewer
        if (records.empty()) return false;
        records.erase(records.begin() + static_cast<std::ptrdiff_t>(below(rng_, records.size())));
        return true;
      case 3: {  // renamed
        if (records.empty()) return false;
        const char* names[] = {"data.pkl", "data/", "constants.pkl", "../data/0",
                               "code/__torch__.py"};
        records[below(rng_, records.size())].first =
            rng_() % 2 ? "data/" + record_key() : pick(rng_, names);
        return true;
      }
      default: {  // contents
        if (records.empty()) return false;
        std::string& b = records[below(rng_, records.size())].second;
        const std::size_t size = b.size();
        b.resize(std::max<std::size_t>(size * 2, 64));
        b.resize(LLVMFuzzerMutate(reinterpret_cast<std::uint8_t*>(&b[0]), size, b.size()));
        return true;
      }
    }
  }
  bool mutate_header() {
    switch (rng_() % 2) {
      case 0:
        in_.zip_change = static_cast<std::uint8_t>(rng_() % kNumZipChanges);
        break;
      default:
        in_.zip_record = static_cast<std::uint8_t>(rng_());
        in_.zip_arg = rng_() % 2 ? static_cast<std::uint32_t>(rng_())
                                 : static_cast<std::uint32_t>(pick(rng_, kInts));
    }
    return true;
  }

  Input& in_;
  Rng rng_;
  // The pickle edited: data.pkl (-1) or a record's (an index: records may be added meanwhile).
  int target_record_ = -1;
  std::vector<std::string> ops_;
  std::vector<StorageRef> storages_;
};

/// LLVMFuzzerCustomMutator's body: the input parsed, edited once (or its bytes mutated by
/// libFuzzer's own mutations), written back if it fits in `max_size`. An input too short to parse
/// becomes `start` as it is (an empty corpus starts there).
inline std::size_t mutate(std::uint8_t* data, std::size_t size, std::size_t max_size, unsigned seed,
                          const Input& start) {
  Input in;
  const bool parsed = parse(data, size, in);
  if (!parsed) in = start;
  if (!parsed || (seed % 16 != 0 && Mutator(in, seed).run())) {
    const std::string out = serialize(in);
    if (out.size() <= max_size) {
      std::memcpy(data, out.data(), out.size());
      return out.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

/// LLVMFuzzerCustomCrossOver's body: the first pickle's opcodes up to a point, the second's from
/// a point, and the records of both (the first's where names agree).
inline std::size_t cross_over(const std::uint8_t* data1, std::size_t size1,
                              const std::uint8_t* data2, std::size_t size2, std::uint8_t* out,
                              std::size_t max_out_size, unsigned seed) {
  Input a, b;
  if (!parse(data1, size1, a) || !parse(data2, size2, b)) return 0;
  Rng rng(seed);
  const std::vector<std::string> x = split(a.pickle), y = split(b.pickle);
  const std::size_t i = below(rng, x.size() + 1), j = below(rng, y.size() + 1);
  a.pickle = join(std::vector<std::string>(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(i))) +
             join(std::vector<std::string>(y.begin() + static_cast<std::ptrdiff_t>(j), y.end()));
  for (const auto& record : b.records) {
    bool known = false;
    for (const auto& r : a.records) known = known || r.first == record.first;
    if (!known && a.records.size() < kMaxRecords) a.records.push_back(record);
  }
  const std::string bytes = serialize(a);
  if (bytes.size() > max_out_size) return 0;
  std::memcpy(out, bytes.data(), bytes.size());
  return bytes.size();
}

}  // namespace mixprec::fuzz
