// Internal: mixprec's restricted unpickler, the only code that parses the pickle of an untrusted
// torch.save file. It builds a value tree of its own (no LibTorch object); unpickle.cpp turns a
// checked tree into IValues and tensors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::detail::pickle {

/// The element types of dense tensors in torch.save's files. kUntyped is a storage of bytes
/// (torch.UntypedStorage, whose tensors name their dtype: _rebuild_tensor_v3).
enum class Dtype : std::uint8_t {
  kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kFloat32, kFloat64, kComplex32, kComplex64,
  kComplex128, kBool, kBFloat16, kFloat8_e5m2, kFloat8_e4m3fn, kFloat8_e5m2fnuz,
  kFloat8_e4m3fnuz, kUInt16, kUInt32, kUInt64, kFloat8_e8m0fnu, kFloat4_e2m1fn_x2, kUntyped
};

/// A dtype's names and sizes.
struct DtypeInfo {
  const char* python;   ///< torch.<python>: "float32"
  const char* storage;  ///< torch.<storage>: "FloatStorage" (Python's and LibTorch's names)
  std::uint8_t size;    ///< bytes an element
  std::uint8_t swap;    ///< bytes a byte-swapped unit (a complex number's half)
};
const DtypeInfo& info(Dtype dtype);

/// What a node is.
enum class Kind : std::uint8_t {
  kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor
};

/// One value. Containers' items are in Tree::items(); strings point into the pickle.
struct Node {
  Kind kind = Kind::kNone;
  /// kDict: 1 for an OrderedDict; kList: the Kind every item must have (kNone: any), from
  /// build_intlist and the like; kGlobal: which global (reader-internal).
  std::uint8_t tag = 0;
  std::uint32_t count = 0;    ///< kString: bytes; kTuple: items
  std::uint64_t value = 0;    ///< kInt: the int64's bits; kFloat: the double's; kString: offset
                              ///< in the pickle; kTuple: first item in the item pool;
                              ///< kStorage, kTensor: index in storages() / tensors()
};

/// A storage: record data/<key> of the archive, `count` elements of `dtype`.
struct Storage {
  std::string_view key;
  Dtype dtype = Dtype::kUInt8;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;  ///< count times the element size, checked not to overflow
};

/// A dense strided tensor on a storage, checked to lie inside it.
struct Tensor {
  std::uint32_t storage = 0;
  Dtype dtype = Dtype::kUInt8;
  bool requires_grad = false;
  std::uint32_t sizes = 0;    ///< the node of its size tuple
  std::uint32_t strides = 0;  ///< the node of its stride tuple
  std::int64_t offset = 0;    ///< in elements
};

/// The limits that hold for every input (docs/checkpoints.md, "Untrusted files").
struct Limits {
  /// Containers nested in containers, the root counting 1 (Python's recursion limit is 1000).
  std::uint32_t depth = 1000;
  /// Dimensions of a tensor.
  std::uint32_t dims = 64;
  /// Values of the tree written out without sharing, beyond 16 per node of the pickle: a
  /// pickle that shares values makes a tree far larger than itself ("billion laughs").
  std::uint64_t expanded = std::uint64_t{1} << 20;
};

/// A checked value tree: acyclic, within the limits, every tensor inside its storage, every
/// dict key a str or an int.
class Tree {
 public:
  std::uint32_t root() const { return root_; }
  const Node& node(std::uint32_t id) const { return nodes_[id]; }
  /// A tuple's, list's or dict's items; a dict's are key, value, key, value, ... (a key may
  /// repeat: the last value wins, as in Python).
  const std::uint32_t* items(std::uint32_t id, std::uint32_t& count) const;
  std::string_view string(std::uint32_t id) const;
  /// A tensor's sizes and strides, from its tuples.
  std::vector<std::int64_t> ints(std::uint32_t tuple) const;
  const std::vector<Storage>& storages() const { return storages_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  /// The nodes reachable from the root, children before their parents.
  const std::vector<std::uint32_t>& order() const { return order_; }
  std::size_t size() const { return nodes_.size(); }

 private:
  friend class Reader;
  std::string_view pickle_;
  std::vector<Node> nodes_;
  std::vector<std::uint32_t> pool_;        // tuple items
  std::vector<std::uint32_t> list_start_;  // per node: first of its list/dict items in list_items_
  std::vector<std::uint32_t> list_items_;
  std::vector<Storage> storages_;
  std::vector<Tensor> tensors_;
  std::vector<std::uint32_t> order_;
  std::uint32_t root_ = 0;
};

/// Parses `pickle` (data.pkl of `where`, for messages) as the restricted unpickler does: only
/// the opcodes of protocols 2 to 5 that torch.save writes for state dicts, only the globals a
/// state dict needs (Note [Restricted unpickler]). Throws c10::Error naming the byte and what
/// was refused. The tree's strings point into `pickle`, which must outlive it. Storage sizes are
/// checked against the archive by the caller (unpickle.cpp).
Tree read(std::string_view pickle, const std::string& where, const Limits& limits = {});

}  // namespace mixprec::detail::pickle
