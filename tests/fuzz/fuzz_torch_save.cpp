// libFuzzer target: mixprec::pickle_load on torch.save archives built from a structured input
// (torch_save_input.h) by a custom mutator (torch_save_mutator.h) that edits the pickle opcode by
// opcode and the records as records, so the archive stays valid and the storages are reached.
// It must return a value or throw c10::Error; every tensor it returns must lie inside its storage.
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>
#include <vector>

#include "fuzz/torch_save_input.h"
#include "fuzz/torch_save_mutator.h"
#include "mixprec/checkpoint.h"

namespace {

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "fuzz_torch_save: %s\n", why);
  std::abort();
}

// A loaded tensor must be a dense CPU tensor whose every element lies inside its storage; its
// first and last bytes are read, so that AddressSanitizer sees a storage smaller than it says.
void check_tensor(const at::Tensor& t) {
  if (!t.defined() || t.layout() != at::kStrided || !t.device().is_cpu()) {
    fail("a loaded tensor is not a dense CPU tensor");
  }
  if (t.numel() == 0) return;
  __extension__ typedef unsigned __int128 Wide;
  Wide last = static_cast<Wide>(t.storage_offset());
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) fail("a loaded tensor has a negative stride");
    last += static_cast<Wide>(t.size(d) - 1) * static_cast<Wide>(t.stride(d));
  }
  const Wide end = (last + 1) * static_cast<Wide>(t.element_size());
  if (end > static_cast<Wide>(t.storage().nbytes()))
    fail("a loaded tensor reaches past its storage");
  const auto* bytes = static_cast<const volatile unsigned char*>(t.storage().data());
  const std::size_t first = static_cast<std::size_t>(t.storage_offset()) * t.element_size();
  unsigned char sink = bytes[first];
  sink ^= bytes[static_cast<std::size_t>(end) - 1];
  (void)sink;
}

// Walks the loaded value without recursion, each shared container once.
void check_value(const c10::IValue& root) {
  std::vector<const c10::IValue*> todo{&root};
  std::unordered_set<const void*> seen;
  while (!todo.empty()) {
    const c10::IValue* v = todo.back();
    todo.pop_back();
    if (v->isTensor()) {
      check_tensor(v->toTensor());
    } else if (v->isTuple() || v->isList() || v->isGenericDict()) {
      if (!seen.insert(v->internalToPointer()).second) continue;
      if (v->isTuple()) {
        for (const c10::IValue& e : v->toTupleRef().elements()) todo.push_back(&e);
      } else if (v->isList()) {
        for (const c10::IValue& e : v->toListRef()) todo.push_back(&e);
      } else {
        for (const auto& e : v->toGenericDict()) {
          todo.push_back(&e.key());
          todo.push_back(&e.value());
        }
      }
    }
  }
}

// What the mutator starts from when an input is too short to parse: a state dict of one tensor.
mixprec::fuzz::Input start() {
  using namespace mixprec::fuzz;
  Input in;
  in.pickle = std::string("\x80\x02}q\x00(", 5) + str_op("w") +
              global_op("torch._utils", "_rebuild_tensor_v2") + "((" + str_op("storage") +
              global_op("torch", "FloatStorage") + str_op("0") + str_op("cpu") + int_op(4) + "tQ" +
              int_op(0) + int_op(2) + int_op(2) + "\x86" + int_op(2) + int_op(1) + "\x86" + "\x89" +
              global_op("collections", "OrderedDict") + ")RtRu.";
  in.records = {{"data/0", std::string(16, '\x01')}, {"byteorder", "little"}, {"version", "3\n"}};
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mixprec::fuzz::Input in;
  if (!mixprec::fuzz::parse(data, size, in)) return 0;
  const std::vector<char> file = mixprec::fuzz::write_archive(in);
  c10::IValue value;
  try {
    value = mixprec::pickle_load(file);
  } catch (const c10::Error&) {
    return 0;
  }
  check_value(value);
  return 0;
}

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned int seed) {
  static const mixprec::fuzz::Input kStart = start();
  return mixprec::fuzz::mutate(data, size, max_size, seed, kStart);
}

extern "C" std::size_t LLVMFuzzerCustomCrossOver(const std::uint8_t* data1, std::size_t size1,
                                                 const std::uint8_t* data2, std::size_t size2,
                                                 std::uint8_t* out, std::size_t max_out_size,
                                                 unsigned int seed) {
  return mixprec::fuzz::cross_over(data1, size1, data2, size2, out, max_out_size, seed);
}
