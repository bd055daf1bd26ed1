// One line of text for a loaded value, written the same way by tests/python/value_dump.py from
// what Python's torch.load returns: the tests compare mixprec's loads with PyTorch's as text.
// Storages are numbered in order of first appearance, so that sharing is compared too.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

namespace mixprec::test {

/// Python's name of a dtype (str(torch.float32) without "torch.").
inline std::string python_dtype(at::ScalarType t) {
  switch (t) {
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    case at::kBool: return "bool";
    case at::kBFloat16: return "bfloat16";
    default: return c10::toString(t);  // float8 and newer: c10's name ("Float8_e4m3fn")
  }
}

class ValueDump {
 public:
  std::string operator()(const c10::IValue& v) {
    std::ostringstream out;
    write(v, out);
    return out.str();
  }

 private:
  void write(const c10::IValue& v, std::ostringstream& out) {
    if (v.isNone()) {
      out << "None";
    } else if (v.isBool()) {
      out << (v.toBool() ? "True" : "False");
    } else if (v.isInt()) {
      out << v.toInt();
    } else if (v.isDouble()) {
      const double d = v.toDouble();
      std::uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof d);
      out << "f" << std::hex << bits << std::dec;
    } else if (v.isString()) {
      out << "s" << v.toStringRef().size() << ":" << v.toStringRef();
    } else if (v.isTuple()) {
      out << "(";
      for (const auto& e : v.toTupleRef().elements()) write(e, out), out << ",";
      out << ")";
    } else if (v.isList()) {
      out << "[";
      for (const c10::IValue& e : v.toListRef()) write(e, out), out << ",";
      out << "]";
    } else if (v.isGenericDict()) {
      out << "{";
      for (const auto& e : v.toGenericDict()) write(e.key(), out), out << ":", write(e.value(), out), out << ",";
      out << "}";
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      const void* storage = t.storage().data();
      const auto found = storages_.emplace(storage, storages_.size()).first;
      out << "T" << python_dtype(t.scalar_type()) << "|" << t.sizes() << "|" << t.strides() << "|"
          << t.storage_offset() << "|st" << found->second << "|rg" << t.requires_grad() << "|";
      const at::Tensor c = t.detach().contiguous();
      const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
      static const char kHex[] = "0123456789abcdef";
      for (std::int64_t i = 0; i < c.numel() * static_cast<std::int64_t>(c.element_size()); ++i) {
        out << kHex[bytes[i] >> 4] << kHex[bytes[i] & 15];
      }
    } else {
      out << "<" << v.tagKind() << ">";
    }
  }

  std::map<const void*, std::size_t> storages_;
};

}  // namespace mixprec::test
