// For tests/python/unpickle_interop.py:
//   unpickle_dump FILE...       each file loaded with mixprec::pickle_load, one line each,
//                               "<file>\t<value>" (tests/value_dump.h) or "<file>\tERROR <message>"
//   unpickle_dump --write DIR   writes a file through each of mixprec's writers (save_checkpoint,
//                               the C ABI's path and stream saves) for Python's torch.load
#include <mixprec/c_api.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "value_dump.h"

namespace {

int write_files(const std::string& dir) {
  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                              torch::nn::Linear(4, 2));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(256.0));
  model->forward(torch::randn({5, 3})).sum().backward();
  adam.step();
  mixprec::save_checkpoint(dir + "/written_checkpoint.pt", *model, adam, scaler);
  mixprec_grad_scaler* s = nullptr;
  if (mixprec_grad_scaler_create(nullptr, &s) != MIXPREC_OK ||
      mixprec_grad_scaler_save(s, (dir + "/written_scaler.pt").c_str()) != MIXPREC_OK ||
      mixprec_optimizer_save(&adam, (dir + "/written_optimizer.pt").c_str()) != MIXPREC_OK) {
    std::cerr << mixprec_last_error() << "\n";
    return 1;
  }
  std::FILE* f = std::fopen((dir + "/written_stream.pt").c_str(), "wb");
  const mixprec_write_fn write = [](void* file, const void* data, size_t size) {
    return std::fwrite(data, 1, size, static_cast<std::FILE*>(file)) == size ? 0 : 1;
  };
  const int rc = mixprec_optimizer_save_to(&adam, write, f);
  std::fclose(f);
  mixprec_grad_scaler_destroy(s);
  if (rc != MIXPREC_OK) std::cerr << mixprec_last_error() << "\n";
  return rc == MIXPREC_OK ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write") return write_files(argv[2]);
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    std::cout << argv[i] << "\t";
    try {
      std::cout << mixprec::test::ValueDump()(mixprec::pickle_load(bytes)) << "\n";
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      std::cout << "ERROR " << what.substr(0, what.find('\n')) << "\n";
    }
  }
  return 0;
}
