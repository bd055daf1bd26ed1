// libFuzzer target: mixprec::load_checkpoint on an untrusted file (fuzz_input.h), into the model,
// Adam and scaler of tests/fixtures/python_checkpoint.pt. It must load or throw an error
// (c10::Error), never crash, hang or allocate without bound; when it throws, model, optimizer and
// scaler must be as they were.
#include <torch/torch.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "mixprec/mixprec.h"

namespace {

struct Run {
  torch::nn::Sequential model{torch::nn::Linear(torch::nn::LinearOptions(3, 4).bias(false)),
                              torch::nn::BatchNorm1d(4), torch::nn::ReLU(),
                              torch::nn::Linear(4, 2)};
  torch::optim::Adam adam{model->parameters(), torch::optim::AdamOptions(0.01)};
  mixprec::GradScaler scaler{mixprec::GradScalerOptions().init_scale(1024.0)};
};

// Everything a load may change, as bytes.
std::vector<char> snapshot(Run& run) {
  c10::impl::GenericDict all(c10::StringType::get(), c10::AnyType::get());
  all.insert("model", mixprec::module_state_dict(*run.model));
  all.insert("optimizer", mixprec::optimizer_state_dict(run.adam));
  all.insert("scaler", run.scaler.state_dict());
  return mixprec::pickle_save_untagged(all);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path =
      "/tmp/mixprec_fuzz_checkpoint_" + std::to_string(::getpid()) + ".pt";
  const std::vector<char> bytes = mixprec::fuzz::file_bytes(data, size);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  Run run;
  const std::vector<char> before = snapshot(run);
  try {
    mixprec::load_checkpoint(path, *run.model, run.adam, run.scaler);
  } catch (const c10::Error&) {
    if (snapshot(run) != before) {
      std::fprintf(stderr, "load_checkpoint threw and changed the model, optimizer or scaler\n");
      std::abort();
    }
  }
  std::remove(path.c_str());
  return 0;
}
