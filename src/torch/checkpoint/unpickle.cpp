// load_torch_save (unpickle.h): the archive's records checked against the pickle's storages, the
// storages read, and the checked value tree made into IValues and tensors without recursion.
#include "torch/checkpoint/unpickle.h"

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/torch_version.h"
#include "torch/checkpoint/pickle_reader.h"

namespace mixprec::detail {
namespace {

namespace pk = pickle;

// The LibTorch dtype of a pickle dtype, where this LibTorch has it.
at::ScalarType scalar_type(pk::Dtype d, const std::string& where) {
  switch (d) {
    case pk::Dtype::kUInt8: case pk::Dtype::kUntyped: return at::kByte;
    case pk::Dtype::kInt8: return at::kChar;
    case pk::Dtype::kInt16: return at::kShort;
    case pk::Dtype::kInt32: return at::kInt;
    case pk::Dtype::kInt64: return at::kLong;
    case pk::Dtype::kFloat16: return at::kHalf;
    case pk::Dtype::kFloat32: return at::kFloat;
    case pk::Dtype::kFloat64: return at::kDouble;
    case pk::Dtype::kComplex32: return at::kComplexHalf;
    case pk::Dtype::kComplex64: return at::kComplexFloat;
    case pk::Dtype::kComplex128: return at::kComplexDouble;
    case pk::Dtype::kBool: return at::kBool;
    case pk::Dtype::kBFloat16: return at::kBFloat16;
#if MIXPREC_TORCH_FP8
    case pk::Dtype::kFloat8_e5m2: return at::kFloat8_e5m2;
    case pk::Dtype::kFloat8_e4m3fn: return at::kFloat8_e4m3fn;
#endif
#if MIXPREC_TORCH_AT_LEAST(2, 2)
    case pk::Dtype::kFloat8_e5m2fnuz: return at::kFloat8_e5m2fnuz;
    case pk::Dtype::kFloat8_e4m3fnuz: return at::kFloat8_e4m3fnuz;
#endif
#if MIXPREC_TORCH_AT_LEAST(2, 3)
    case pk::Dtype::kUInt16: return at::kUInt16;
    case pk::Dtype::kUInt32: return at::kUInt32;
    case pk::Dtype::kUInt64: return at::kUInt64;
#endif
#if MIXPREC_TORCH_AT_LEAST(2, 7)
    case pk::Dtype::kFloat8_e8m0fnu: return at::kFloat8_e8m0fnu;
#endif
#if MIXPREC_TORCH_FLOAT4  // LibTorch 2.8's, not 2.7's
    case pk::Dtype::kFloat4_e2m1fn_x2: return at::kFloat4_e2m1fn_x2;
#endif
    default:
      break;
  }
  TORCH_CHECK(false, "mixprec: ", where, " has a tensor of dtype ", pk::info(d).python,
              ", which this LibTorch (", TORCH_VERSION, ") does not have");
}

void* bytes_of(const c10::Storage& storage) {
#if MIXPREC_TORCH_AT_LEAST(2, 1)
  return storage.mutable_data();
#else
  return storage.data();
#endif
}

// torch.load's conversion of a big-endian file: each storage swapped by its element's units
// (a complex number's halves), bytes (and untyped storages) left as they are.
void swap_bytes(unsigned char* data, std::uint64_t bytes, int unit) {
  if (unit == 1) return;
  for (std::uint64_t i = 0; i + static_cast<std::uint64_t>(unit) <= bytes; i += unit) {
    std::reverse(data + i, data + i + unit);
  }
}

// Note [Dict keys that LibTorch's hash table cannot hold]
// c10's dicts are ska order-preserving flat hash maps: robin-hood linear probing on a table of
// 2^b slots, at most half full, the slot of a key the top b bits of DictKeyHash(key) times
// 11400714819323198485 (Fibonacci hashing); an insert that would land max(4, b) or more slots
// past its own doubles the table and tries again, whatever its size. DictKeyHash of an int is
// the int, so 64 ints chosen to agree in those bits make it double until the allocation fails
// (std::bad_alloc) or the machine is out of memory; strings with one std::hash do the same.
// Before a dict is filled, its distinct keys are placed as robin hood places them (sorted by
// slot, each at the first free slot from its own): it is refused unless they fit with the
// table at most 8 times the size its load needs.
void check_dict_keys(const std::vector<c10::IValue>& keys, const std::string& where) {
  struct Key {
    std::uint64_t hash;
    std::size_t index;
  };
  std::vector<Key> hashed;
  hashed.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::size_t hash = 0;
    try {
      hash = c10::detail::DictKeyHash()(keys[i]);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "mixprec: ", where, " has a dict key that this LibTorch (",
                  TORCH_VERSION, ") cannot hash: ", e.what());
    }
    hashed.push_back({static_cast<std::uint64_t>(hash), i});
  }
  // Distinct keys: a key set twice is one entry (the last value wins).
  auto less = [&](const Key& a, const Key& b) {  // keys are ints or strs (pickle_reader.h)
    if (a.hash != b.hash) return a.hash < b.hash;
    const c10::IValue &x = keys[a.index], &y = keys[b.index];
    if (x.isInt() != y.isInt()) return x.isInt();
    return x.isInt() ? x.toInt() < y.toInt() : x.toStringRef() < y.toStringRef();
  };
  std::sort(hashed.begin(), hashed.end(), less);
  std::vector<std::uint64_t> slots;
  slots.reserve(hashed.size());
  for (std::size_t i = 0; i < hashed.size(); ++i) {
    if (i > 0 && !less(hashed[i - 1], hashed[i])) continue;  // the same key again
    slots.push_back(hashed[i].hash * 11400714819323198485ull);
  }
  std::sort(slots.begin(), slots.end());
  int bits = 2;  // the table has at least 4 slots and is at most half full
  while ((std::uint64_t{1} << bits) < 2 * slots.size()) ++bits;
  for (int b = bits; b <= bits + 3; ++b) {
    const std::uint64_t max_lookups = std::max(4, b);
    std::uint64_t next = 0, worst = 0;
    for (const std::uint64_t s : slots) {
      const std::uint64_t own = s >> (64 - b);
      const std::uint64_t at = std::max(own, next);
      worst = std::max(worst, at - own);
      next = at + 1;
    }
    if (worst < max_lookups) return;
  }
  TORCH_CHECK(false, "mixprec: ", where, " has a dict of ", slots.size(),
              " keys that collide in LibTorch's dict hash table, which would grow without bound "
              "to hold them (crafted keys; Note [Dict keys that LibTorch's hash table cannot "
              "hold])");
}

class Builder {
 public:
  Builder(const pk::Tree& tree, std::vector<c10::Storage> storages, const std::string& where)
      : tree_(tree), storages_(std::move(storages)), where_(where), values_(tree.size()) {}

  c10::IValue run() {
    for (const std::uint32_t id : tree_.order()) values_[id] = make(id);
    return std::move(values_[tree_.root()]);
  }

 private:
  c10::IValue make(std::uint32_t id) {
    const pk::Node& n = tree_.node(id);
    std::uint32_t count = 0;
    switch (n.kind) {
      case pk::Kind::kNone: return c10::IValue();
      case pk::Kind::kBool: return c10::IValue(n.value != 0);
      case pk::Kind::kInt: return c10::IValue(static_cast<std::int64_t>(n.value));
      case pk::Kind::kFloat: {
        double d = 0;
        std::memcpy(&d, &n.value, sizeof d);
        return c10::IValue(d);
      }
      case pk::Kind::kString: return c10::IValue(std::string(tree_.string(id)));
      case pk::Kind::kTuple: {
        const std::uint32_t* items = tree_.items(id, count);
        std::vector<c10::IValue> elements;
        elements.reserve(count);
        for (std::uint32_t i = 0; i < count; ++i) elements.push_back(values_[items[i]]);
        return c10::ivalue::Tuple::create(std::move(elements));
      }
      case pk::Kind::kList: return list(id, static_cast<pk::Kind>(n.tag));
      case pk::Kind::kDict: return dict(id);
      case pk::Kind::kTensor: return tensor(tree_.tensors()[n.value]);
      case pk::Kind::kGlobal:
      case pk::Kind::kStorage:
        break;
    }
    TORCH_INTERNAL_ASSERT(false, "mixprec: the checked tree holds a global or a storage");
  }

  c10::IValue list(std::uint32_t id, pk::Kind items_kind) {
    std::uint32_t count = 0;
    const std::uint32_t* items = tree_.items(id, count);
    auto fill = [&](auto list, auto get) {
      list.reserve(count);
      for (std::uint32_t i = 0; i < count; ++i) list.push_back(get(values_[items[i]]));
      return c10::IValue(std::move(list));
    };
    switch (items_kind) {
      case pk::Kind::kInt:
        return fill(c10::List<std::int64_t>(), [](const c10::IValue& v) { return v.toInt(); });
      case pk::Kind::kFloat:
        return fill(c10::List<double>(), [](const c10::IValue& v) { return v.toDouble(); });
      case pk::Kind::kBool:
        return fill(c10::List<bool>(), [](const c10::IValue& v) { return v.toBool(); });
      case pk::Kind::kTensor:
        return fill(c10::List<at::Tensor>(), [](const c10::IValue& v) { return v.toTensor(); });
      default:
        return fill(c10::impl::GenericList(c10::AnyType::get()),
                    [](const c10::IValue& v) { return v; });
    }
  }

  c10::IValue dict(std::uint32_t id) {
    std::uint32_t count = 0;
    const std::uint32_t* items = tree_.items(id, count);
    std::vector<c10::IValue> keys;
    keys.reserve(count / 2);
    for (std::uint32_t i = 0; i < count; i += 2) keys.push_back(values_[items[i]]);
    check_dict_keys(keys, where_);
    c10::impl::GenericDict dict(c10::AnyType::get(), c10::AnyType::get());
    dict.reserve(keys.size());
    for (std::uint32_t i = 0; i < count; i += 2) {
      dict.insert_or_assign(values_[items[i]], values_[items[i + 1]]);
    }
    return dict;
  }

  c10::IValue tensor(const pk::Tensor& t) {
    const at::ScalarType dtype = scalar_type(t.dtype, where_);
    at::Tensor out = at::empty({0}, at::TensorOptions().dtype(dtype));
    out.set_(storages_[t.storage], t.offset, tree_.ints(t.sizes), tree_.ints(t.strides));
    if (t.requires_grad) {
      TORCH_CHECK(at::isFloatingType(dtype) || at::isComplexType(dtype), "mixprec: ", where_,
                  " has a ", dtype, " tensor that requires grad; only floating point and complex "
                  "tensors can");
      out.set_requires_grad(true);
    }
    return out;
  }

  const pk::Tree& tree_;
  const std::vector<c10::Storage> storages_;
  const std::string& where_;
  std::vector<c10::IValue> values_;
};

// The archive's format version: LibTorch's reader takes .data/version, else version.
void check_version(const ZipArchive& archive, const std::string& where) {
  const ZipRecord* record = archive.find(".data/version");
  if (record == nullptr) record = archive.find("version");
  TORCH_CHECK(record != nullptr, "mixprec: ", where, " has no version record; torch.save writes ",
              archive.folder(), "/version");
  std::string text = archive.read_bytes(*record, 32);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  TORCH_CHECK(!text.empty() && text.size() <= 9 &&
                  text.find_first_not_of("0123456789") == std::string::npos && std::stol(text) >= 1,
              "mixprec: ", where, " has the format version \"", text.substr(0, 32),
              "\"; torch.save writes a number");
}

c10::IValue load(std::unique_ptr<ByteSource> source) {
  const ZipArchive archive(std::move(source));
  const std::string& where = archive.source().name();
  check_version(archive, where);
  bool big_endian = false;
  if (const ZipRecord* order = archive.find("byteorder")) {
    const std::string text = archive.read_bytes(*order, 16);
    TORCH_CHECK(text == "little" || text == "big", "mixprec: ", where, " has the byte order \"",
                text, "\"; torch.save writes \"little\" or \"big\"");
    big_endian = text == "big";
  }
  const ZipRecord* data = archive.find("data.pkl");
  TORCH_CHECK(data != nullptr, "mixprec: ", where, " has no ", archive.folder(),
              "/data.pkl, the pickle torch.save writes");
  const std::string pickle = archive.read_bytes(*data, data->size);
  const pk::Tree tree = pk::read(pickle, where);
  // Every storage is a record of exactly its size, before any is allocated.
  std::vector<const ZipRecord*> records;
  for (const pk::Storage& s : tree.storages()) {
    const ZipRecord* r = archive.find("data/" + std::string(s.key));
    TORCH_CHECK(r != nullptr, "mixprec: ", where, " has no record ", archive.folder(), "/data/",
                std::string(s.key.substr(0, 64)), " for a storage of its pickle");
    TORCH_CHECK(r->size == s.bytes, "mixprec: ", where, ": record ", archive.folder(), "/data/",
                std::string(s.key.substr(0, 64)), " has ", r->size, " bytes; its storage states ",
                s.count, " elements of ", static_cast<int>(pk::info(s.dtype).size), " bytes (", s.bytes, ")");
    records.push_back(r);
  }
  for (const pk::Tensor& t : tree.tensors()) (void)scalar_type(t.dtype, where);
  std::vector<c10::Storage> storages;
  storages.reserve(records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    const pk::Storage& s = tree.storages()[i];
    c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<std::size_t>(s.bytes),
                         c10::GetDefaultCPUAllocator(), /*resizable=*/false);
    auto* bytes = static_cast<unsigned char*>(bytes_of(storage));
    archive.read(*records[i], bytes);
    if (big_endian) swap_bytes(bytes, s.bytes, pk::info(s.dtype).swap);
    storages.push_back(std::move(storage));
  }
  return Builder(tree, std::move(storages), where).run();
}

}  // namespace

c10::IValue load_torch_save(std::unique_ptr<ByteSource> source) {
  const std::string where = source->name();
  try {
    return load(std::move(source));
  } catch (const c10::Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    TORCH_CHECK(false, "mixprec: not enough memory to load ", where);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "mixprec: cannot load ", where, ": ", e.what());
  }
}

}  // namespace mixprec::detail
