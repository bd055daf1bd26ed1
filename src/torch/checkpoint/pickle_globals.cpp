// The globals, storages and tensors a state dict may hold (Note [Restricted unpickler], in
// pickle_reader.cpp): the allow-list of globals by name, torch.save's persistent ids of storages,
// the tensor and parameter rebuilds, and each tensor's extent inside its storage.
#include <algorithm>
#include <limits>
#include <string>

#include "torch/checkpoint/pickle_machine.h"

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

}  // namespace

const DtypeInfo& info(Dtype dtype) { return kDtypes[static_cast<int>(dtype)]; }

std::uint32_t Reader::global(std::string_view module, std::string_view name) {
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

std::uint32_t Reader::add_global(Global g, int dtype) {
  return add(Kind::kGlobal, static_cast<std::uint64_t>(dtype), 0, static_cast<std::uint8_t>(g));
}

// The persistent id of a storage: ('storage', class, key, location, count).
std::uint32_t Reader::persistent_id(std::uint32_t pid) {
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

void Reader::reduce() {
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
Kind Reader::type_of_tag(std::string_view type) const {
  if (type == "List[int]") return Kind::kInt;
  if (type == "List[float]") return Kind::kFloat;
  if (type == "List[bool]") return Kind::kBool;
  if (type == "List[Tensor]") return Kind::kTensor;
  return Kind::kNone;
}

std::uint32_t Reader::tag_list(std::uint32_t value, Kind items) {
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
std::uint32_t Reader::rebuild(Global g, const std::uint32_t* a, std::uint32_t n) {
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
void Reader::must_be_empty(std::uint32_t dict, const char* what) {
  fail_if(node(dict).kind != Kind::kDict && node(dict).kind != Kind::kNone, what,
          " must be an empty dict, got a ", kind_name(dict));
  if (node(dict).kind == Kind::kDict) empty_dicts_.emplace_back(dict, what);
}

void Reader::check_extent(const Tensor& t, const Storage& s) {
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

void Reader::build() {
  const std::uint32_t state = pop();
  const std::uint32_t inst = top();
  // Python's weights-only unpickler builds tensors (legacy), parameters and OrderedDicts; of
  // those, torch.save writes only the last's BUILD (its attributes: module versions).
  fail_if(node(inst).kind != Kind::kDict || (node(inst).tag & kOrderedFlag) == 0,
          "BUILD of a ", kind_name(inst), "; only an OrderedDict's attributes are read");
  fail_if(node(state).kind != Kind::kDict, "an OrderedDict's attributes must be a dict, got a ",
          kind_name(state));
}

}  // namespace mixprec::detail::pickle
