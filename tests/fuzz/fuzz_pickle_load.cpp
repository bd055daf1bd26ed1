// libFuzzer target: mixprec::pickle_load on untrusted bytes, whole files and bare pickles
// (fuzz_input.h). It must return or throw an error (c10::Error), never crash, hang, read out of
// bounds or allocate without bound.
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "mixprec/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)mixprec::pickle_load(mixprec::fuzz::file_bytes(data, size));
  } catch (const c10::Error&) {
  }
  return 0;
}
