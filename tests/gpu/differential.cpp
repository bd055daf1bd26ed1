// mixprec_gpu_differential: the C++ half of the differential run against Python
// (tests/gpu/differential.py writes the inputs, runs this program, trains the same model with
// torch.amp.GradScaler and compares). Usage: mixprec_gpu_differential <folder>
//
// Reads from <folder>:
//   meta.txt        "key value..." lines: in_dim, hidden, out_dim, batch, steps, init_scale,
//                   growth_interval, inf_steps (a list, possibly empty), optimizers (names)
//   params_init.bin float32 little-endian: l1.weight [hidden, in], l1.bias [hidden],
//                   l2.weight [out, hidden], l2.bias [out]
//   x.bin, y.bin    float32 little-endian: [steps, batch, in_dim] and [steps, batch, out_dim]
// For each optimizer name ("sgd": mixprec::optim::SGD(lr 0.05, momentum 0.9); "adamw":
// mixprec::optim::AdamW(lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01)) it trains
// Linear -> ReLU -> Linear with fp16 autocast on CUDA, MSE loss, mixprec::GradScaler, writing
//   cpp_<name>_scales.txt   scaler.get_scale() after every update(), one per line (%.17g)
//   cpp_<name>_params.bin   the final parameters, in the order above (float32 little-endian)
// On a step listed in inf_steps, x[step][0][0] is set to +inf before the forward pass.
// Exit code 0 on success, 2 on bad input or a missing CUDA device.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "differential_io.h"

namespace {

using namespace mixprec::differential;

using torch::Tensor;

struct Setup {
  std::int64_t in_dim, hidden, out_dim, batch, steps, growth_interval;
  double init_scale;
  std::set<std::int64_t> inf_steps;
  std::vector<std::string> optimizers;
  std::vector<Tensor> init;  // l1.weight, l1.bias, l2.weight, l2.bias (CPU)
  Tensor x, y;               // CPU
};

Setup load(const std::string& dir) {
  const auto meta = read_meta(dir + "/meta.txt");
  Setup s;
  s.in_dim = meta_int(meta, "in_dim");
  s.hidden = meta_int(meta, "hidden");
  s.out_dim = meta_int(meta, "out_dim");
  s.batch = meta_int(meta, "batch");
  s.steps = meta_int(meta, "steps");
  s.growth_interval = meta_int(meta, "growth_interval");
  s.init_scale = std::stod(meta.at("init_scale").at(0));
  for (const std::string& v : meta.at("inf_steps")) s.inf_steps.insert(std::stoll(v));
  s.optimizers = meta.at("optimizers");
  const Tensor flat = read_floats(dir + "/params_init.bin",
      {s.hidden * s.in_dim + s.hidden + s.out_dim * s.hidden + s.out_dim});
  std::int64_t offset = 0;
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{
           {s.hidden, s.in_dim}, {s.hidden}, {s.out_dim, s.hidden}, {s.out_dim}}) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    s.init.push_back(flat.narrow(0, offset, n).reshape(shape).clone());
    offset += n;
  }
  s.x = read_floats(dir + "/x.bin", {s.steps, s.batch, s.in_dim});
  s.y = read_floats(dir + "/y.bin", {s.steps, s.batch, s.out_dim});
  return s;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<Tensor>& params) {
  if (name == "sgd") {
    return std::make_unique<mixprec::optim::SGD>(params,
                                                 torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  if (name == "adamw") {
    return std::make_unique<mixprec::optim::AdamW>(
        params, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
  }
  throw std::runtime_error("unknown optimizer '" + name + "' (expected sgd or adamw)");
}

void run(const Setup& s, const std::string& name, const std::string& dir) {
  const torch::Device cuda(torch::kCUDA, 0);
  torch::nn::Linear l1(s.in_dim, s.hidden), l2(s.hidden, s.out_dim);
  {
    torch::NoGradGuard no_grad;
    l1->weight.copy_(s.init[0]);
    l1->bias.copy_(s.init[1]);
    l2->weight.copy_(s.init[2]);
    l2->bias.copy_(s.init[3]);
  }
  l1->to(cuda);
  l2->to(cuda);
  const std::vector<Tensor> params{l1->weight, l1->bias, l2->weight, l2->bias};
  auto opt = make_optimizer(name, params);
  mixprec::GradScaler scaler(mixprec::GradScalerOptions()
                                 .init_scale(s.init_scale)
                                 .growth_interval(s.growth_interval));
  std::ofstream scales(dir + "/cpp_" + name + "_scales.txt");
  for (std::int64_t step = 0; step < s.steps; ++step) {
    Tensor x = s.x[step].clone();
    if (s.inf_steps.count(step) != 0) x.index_put_({0, 0}, std::numeric_limits<float>::infinity());
    x = x.to(cuda);
    const Tensor y = s.y[step].to(cuda);
    opt->zero_grad();
    Tensor loss;
    {
      mixprec::AutocastGuard autocast(torch::kCUDA, torch::kHalf);
      loss = torch::mse_loss(l2->forward(torch::relu(l1->forward(x))), y);
    }
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g\n", scaler.get_scale());
    scales << buf;
  }
  if (!scales) throw std::runtime_error("cannot write the scales of " + name);
  write_floats(dir + "/cpp_" + name + "_params.bin", params);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <folder written by tests/gpu/differential.py>\n";
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::cerr << "mixprec_gpu_differential: no CUDA device (the run needs real fp16 autocast)\n";
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const Setup setup = load(dir);
    for (const std::string& name : setup.optimizers) {
      run(setup, name, dir);
      std::cout << "mixprec_gpu_differential: " << name << " done (" << setup.steps
                << " steps)\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "mixprec_gpu_differential: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
