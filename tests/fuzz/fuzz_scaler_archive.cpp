// libFuzzer target: GradScaler::load through torch::load(scaler, stream), i.e. LibTorch's own
// archive reader (torch::jit::load: zip reader, TorchScript importer, unpickler), which mixprec
// does not control, on archives built like fuzz_torch_save's (torch_save_mutator.h). A refused load
// must leave the scaler as it was. Not in CI: LibTorch 1.13 crashes here within seconds (SEGV in
// ScriptTypeParser::parseClassConstant; a 64 GiB memo for a LONG_BINPUT of 2^32 - 1), inputs in
// tests/fuzz/crashes_libtorch/, docs/testing.md.
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "fuzz/torch_save_input.h"
#include "fuzz/torch_save_mutator.h"
#include "mixprec/mixprec.h"

namespace {

std::vector<char> state_bytes(const mixprec::GradScaler& scaler) {
  return mixprec::pickle_save_untagged(scaler.state_dict());
}

// The mutator's start, and this target's seed: torch::save of a scaler that has run, as records.
mixprec::fuzz::Input start() {
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(1024.0).hysteresis(2));
  scaler.scale(torch::ones({1}));
  std::ostringstream out;
  torch::save(scaler, out);
  const std::string bytes = out.str();
  std::istringstream in(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  mixprec::fuzz::Input input;
  for (const std::string& name : reader.getAllRecords()) {
    const auto [data, size] = reader.getRecord(name);
    std::string record(static_cast<const char*>(data.get()), size);
    if (name == "data.pkl") {
      input.pickle = std::move(record);
    } else {
      input.records.emplace_back(name, std::move(record));
    }
  }
  return input;
}

// MIXPREC_FUZZ_STRICT_ERRORS=1: any exception but c10::Error is a finding (LibTorch's importer
// throws others; off by default, so that the run looks for crashes).
const bool kStrict = std::getenv("MIXPREC_FUZZ_STRICT_ERRORS") != nullptr;

}  // namespace

// MIXPREC_FUZZ_WRITE_START=<folder>: writes the start input there as <folder>/scaler_torch_save,
// the seed that tests/fuzz/make_seeds.py cannot write without LibTorch.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* folder = std::getenv("MIXPREC_FUZZ_WRITE_START")) {
    const std::string bytes = mixprec::fuzz::serialize(start());
    std::ofstream(std::string(folder) + "/scaler_torch_save", std::ios::binary) << bytes;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mixprec::fuzz::Input input;
  if (!mixprec::fuzz::parse(data, size, input)) return 0;
  const std::vector<char> file = mixprec::fuzz::write_archive(input);
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(1024.0));
  const std::vector<char> before = state_bytes(scaler);
  try {
    std::istringstream stream(std::string(file.begin(), file.end()));
    torch::load(scaler, stream);
    return 0;
  } catch (const c10::Error&) {
  } catch (const std::exception& e) {
    if (kStrict) {
      std::fprintf(stderr, "torch::load(scaler) threw a %s: %s\n", typeid(e).name(), e.what());
      std::abort();
    }
  }
  if (state_bytes(scaler) != before) {
    std::fprintf(stderr, "a refused torch::load(scaler) changed the scaler\n");
    std::abort();
  }
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
