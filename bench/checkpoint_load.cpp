// Peak memory and time of loading a checkpoint into a model and its Adam optimizer that exist
// already: mixprec::load_checkpoint against LibTorch's torch::load (its own archives). One load per
// process, so that the peak RSS is the load's; bench/checkpoint_load.py runs the modes beside
// Python's torch.load and prints the table of docs/performance.md.
//   checkpoint_load save <dir> <MiB>      writes <dir>/mixprec.pt, model.pt and optimizer.pt
//   checkpoint_load mixprec|torch <dir> <MiB>   loads them, prints one JSON line
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>

namespace {

// Linear layers of 1024 x 1024 floats (4 MiB each) making `mib` MiB of parameters.
torch::nn::Sequential make_model(std::int64_t mib) {
  torch::nn::Sequential model;
  for (std::int64_t i = 0; i < mib / 4; ++i) {
    model->push_back(torch::nn::Linear(torch::nn::LinearOptions(1024, 1024).bias(false)));
  }
  return model;
}

// Adam's state after one step (exp_avg, exp_avg_sq: twice the parameters), grads freed.
void step_once(torch::nn::Sequential& model, torch::optim::Adam& adam) {
  for (auto& p : model->parameters()) p.mutable_grad() = torch::full_like(p, 1e-3);
  adam.step();
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
}

// A field of /proc/self/status, in bytes ("VmRSS", "VmHWM").
std::int64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS.
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: checkpoint_load save|mixprec|torch <dir> <MiB>\n";
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  const std::int64_t mib = std::stoll(argv[3]);
  torch::manual_seed(0);
  torch::nn::Sequential model = make_model(mib);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  mixprec::GradScaler scaler;
  step_once(model, adam);
  if (mode == "save") {
    mixprec::save_checkpoint(dir + "/mixprec.pt", *model, adam, scaler);
    torch::save(model, dir + "/model.pt");
    torch::save(adam, dir + "/optimizer.pt");
    return 0;
  }
  const std::int64_t state_bytes = 3 * mib * 1024 * 1024;  // parameters and two moments
  reset_peak();
  const std::int64_t before = status_bytes("VmRSS");
  const auto t0 = std::chrono::steady_clock::now();
  if (mode == "mixprec") {
    mixprec::load_checkpoint(dir + "/mixprec.pt", *model, adam, scaler);
  } else if (mode == "torch") {
    torch::load(model, dir + "/model.pt");
    torch::load(adam, dir + "/optimizer.pt");
  } else {
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::int64_t peak = status_bytes("VmHWM");
  std::cout << "{\"loader\": \"" << (mode == "mixprec" ? "mixprec::load_checkpoint" : "torch::load")
            << "\", \"state_bytes\": " << state_bytes << ", \"extra_peak_bytes\": " << peak - before
            << ", \"seconds\": " << seconds << "}\n";
  return 0;
}
