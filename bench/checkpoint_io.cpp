// Peak memory and time of saving and loading a checkpoint of a model and its Adam optimizer:
// mixprec::save_checkpoint / load_checkpoint against LibTorch's torch::save / torch::load (its own
// archives), and the disk's own speed (a plain loop that writes and fsyncs as many bytes). One
// operation per process, so that the peak RSS is the operation's; bench/checkpoint_io.py runs the
// modes beside Python's torch.save and torch.load and prints the tables of docs/performance.md.
//   checkpoint_io save-mixprec|save-torch|load-mixprec|load-torch|disk <dir> <MiB>
// prints one JSON line. The loads read what the saves of the same MiB wrote to <dir>.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

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

// A plain loop writing `bytes` in 8 MiB pieces, then fsync: the disk's sequential write speed.
void write_loop(const std::string& path, std::int64_t bytes) {
  std::vector<char> piece(8 << 20, 1);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  for (std::int64_t done = 0; done < bytes; done += static_cast<std::int64_t>(piece.size())) {
    std::fwrite(piece.data(), 1, piece.size(), f);
  }
  std::fflush(f);
  ::fsync(fileno(f));
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: checkpoint_io save-mixprec|save-torch|load-mixprec|load-torch|disk <dir> <MiB>\n";
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  const std::int64_t mib = std::stoll(argv[3]);
  const std::int64_t state_bytes = 3 * mib * 1024 * 1024;  // parameters and two moments
  if (mode == "disk") {
    reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    write_loop(dir + "/disk.bin", state_bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::remove((dir + "/disk.bin").c_str());
    std::cout << "{\"op\": \"save\", \"who\": \"plain write loop + fsync\", \"state_bytes\": "
              << state_bytes << ", \"extra_peak_bytes\": 0, \"seconds\": " << s << "}\n";
    return 0;
  }
  torch::manual_seed(0);
  torch::nn::Sequential model = make_model(mib);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  mixprec::GradScaler scaler;
  step_once(model, adam);
  reset_peak();
  const std::int64_t before = status_bytes("VmRSS");
  const auto t0 = std::chrono::steady_clock::now();
  std::string who;
  if (mode == "save-mixprec") {
    mixprec::save_checkpoint(dir + "/mixprec.pt", *model, adam, scaler);
    who = "mixprec::save_checkpoint";
  } else if (mode == "save-torch") {
    torch::save(model, dir + "/model.pt");
    torch::save(adam, dir + "/optimizer.pt");
    who = "torch::save";
  } else if (mode == "load-mixprec") {
    mixprec::load_checkpoint(dir + "/mixprec.pt", *model, adam, scaler);
    who = "mixprec::load_checkpoint";
  } else if (mode == "load-torch") {
    torch::load(model, dir + "/model.pt");
    torch::load(adam, dir + "/optimizer.pt");
    who = "torch::load";
  } else {
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::int64_t peak = status_bytes("VmHWM");
  std::cout << "{\"op\": \"" << mode.substr(0, 4) << "\", \"who\": \"" << who
            << "\", \"state_bytes\": " << state_bytes << ", \"extra_peak_bytes\": " << peak - before
            << ", \"seconds\": " << seconds << "}\n";
  return 0;
}
