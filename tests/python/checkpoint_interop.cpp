// mixprec_checkpoint_interop: the C++ half of tests/python/checkpoint_interop.py, which checks
// mixprec::save_checkpoint / load_checkpoint against Python's torch.save / torch.load recipe
// (python3-torch >= 2.4), both ways, by resuming training from each other's checkpoints.
//
// Usage:
//   mixprec_checkpoint_interop train <folder> <opt>           steps [0, switch), then
//       save_checkpoint(<folder>/cpp_<opt>.pt)
//   mixprec_checkpoint_interop resume <folder> <opt> <ckpt>   a model, optimizer and scaler
//       built unlike the saved ones (zero weights, lr 0.5, default scaler) load_checkpoint(<ckpt>)
//       and train steps [switch, steps); writes <ckpt>.params.bin (parameters and buffers, in
//       state_dict order, as float32) and <ckpt>.scaler.txt ("scale tracker")
// <folder>/meta.txt: in_dim hidden out_dim batch steps switch init_scale growth_interval
// inf_steps; params_init.bin, x.bin [steps, batch, in], y.bin [steps, batch, out] (float32).
// Model: Linear (no bias) -> BatchNorm1d -> ReLU -> Linear (torch.nn.Sequential's names); MSE loss; on an
// inf step the last bias's grad[0] is set to +inf after backward. <opt>: sgd (torch::optim::SGD
// 0.05, momentum 0.9), adam (mixprec::optim::Adam 1e-2), adamw (mixprec::optim::AdamW 1e-2,
// weight decay 0.01, amsgrad). Exit code 0 on success, 2 on an exception.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "differential_io.h"

namespace {

using namespace mixprec::differential;
using torch::Tensor;

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<Tensor>& params,
                                                        double lr_override) {
  const bool resumed = lr_override > 0;
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(resumed ? lr_override : 0.05).momentum(0.9));
  }
  if (name == "adam") {
    return std::make_unique<mixprec::optim::Adam>(
        params, torch::optim::AdamOptions(resumed ? lr_override : 1e-2));
  }
  if (name == "adamw") {
    // Resumed: amsgrad comes from the checkpoint too.
    return std::make_unique<mixprec::optim::AdamW>(
        params,
        torch::optim::AdamWOptions(resumed ? lr_override : 1e-2).weight_decay(0.01).amsgrad(!resumed));
  }
  throw std::runtime_error("unknown optimizer '" + name + "'");
}

torch::nn::Sequential make_model(const Meta& meta, const std::string& dir, bool from_init) {
  const std::int64_t in = meta_int(meta, "in_dim"), hid = meta_int(meta, "hidden"),
                     out = meta_int(meta, "out_dim");
  torch::nn::Sequential model(torch::nn::Linear(torch::nn::LinearOptions(in, hid).bias(false)),
                              torch::nn::BatchNorm1d(hid),
                              torch::nn::ReLU(), torch::nn::Linear(hid, out));
  torch::NoGradGuard no_grad;
  if (!from_init) {
    for (Tensor& p : model->parameters()) p.zero_();
    return model;
  }
  const std::vector<Tensor> params = model->parameters();
  std::int64_t numel = 0;
  for (const Tensor& p : params) numel += p.numel();
  const Tensor flat = read_floats(dir + "/params_init.bin", {numel});
  std::int64_t offset = 0;
  for (const Tensor& p : params) {
    p.copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  return model;
}

void train(torch::nn::Sequential& model, torch::optim::Optimizer& opt,
           mixprec::GradScaler& scaler, const Meta& meta, const Tensor& xs, const Tensor& ys,
           std::int64_t begin, std::int64_t end) {
  const std::vector<std::string> infs = meta_list(meta, "inf_steps");
  const Tensor last_bias = model->ptr(3)->as<torch::nn::Linear>()->bias;
  for (std::int64_t s = begin; s < end; ++s) {
    opt.zero_grad();
    const Tensor loss = torch::mse_loss(model->forward(xs[s]), ys[s]);
    scaler.scale(loss).backward();
    if (std::find(infs.begin(), infs.end(), std::to_string(s)) != infs.end()) {
      torch::NoGradGuard no_grad;
      last_bias.grad()[0] = std::numeric_limits<float>::infinity();
    }
    scaler.step(opt);
    scaler.update();
  }
}

int run(int argc, char** argv) {
  if (argc < 4) throw std::runtime_error("usage: train <folder> <opt> | resume <folder> <opt> <ckpt>");
  const std::string mode = argv[1], dir = argv[2], opt_name = argv[3];
  const Meta meta = read_meta(dir + "/meta.txt");
  const std::int64_t in = meta_int(meta, "in_dim"), out = meta_int(meta, "out_dim"),
                     batch = meta_int(meta, "batch"), steps = meta_int(meta, "steps"),
                     switch_at = meta_int(meta, "switch");
  const Tensor xs = read_floats(dir + "/x.bin", {steps, batch, in});
  const Tensor ys = read_floats(dir + "/y.bin", {steps, batch, out});
  if (mode == "train") {
    torch::nn::Sequential model = make_model(meta, dir, /*from_init=*/true);
    auto opt = make_optimizer(opt_name, model->parameters(), /*lr_override=*/0);
    mixprec::GradScaler scaler(mixprec::GradScalerOptions()
                                   .init_scale(meta_double(meta, "init_scale"))
                                   .growth_interval(meta_int(meta, "growth_interval")));
    train(model, *opt, scaler, meta, xs, ys, 0, switch_at);
    mixprec::save_checkpoint(dir + "/cpp_" + opt_name + ".pt", *model, *opt, scaler);
    return 0;
  }
  if (mode == "resume" && argc == 5) {
    const std::string ckpt = argv[4];
    torch::nn::Sequential model = make_model(meta, dir, /*from_init=*/false);
    auto opt = make_optimizer(opt_name, model->parameters(), /*lr_override=*/0.5);
    mixprec::GradScaler scaler;
    mixprec::load_checkpoint(ckpt, *model, *opt, scaler);
    train(model, *opt, scaler, meta, xs, ys, switch_at, steps);
    std::vector<Tensor> all;
    for (const auto& item : mixprec::module_state_dict(*model)) all.push_back(item.value().toTensor());
    write_floats(ckpt + ".params.bin", all);
    std::ofstream(ckpt + ".scaler.txt") << std::setprecision(17) << scaler.get_scale() << " "
                                        << scaler.state_dict().at("_growth_tracker").toInt() << "\n";
    return 0;
  }
  throw std::runtime_error("unknown mode '" + mode + "'");
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);  // as the Python side: the same reduction order in every kernel
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "mixprec_checkpoint_interop: " << e.what() << "\n";
    return 2;
  }
}
