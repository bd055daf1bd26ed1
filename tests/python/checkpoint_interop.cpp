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
// For tests/python/unpickle_interop.py:
//   mixprec_checkpoint_interop dump FILE...   each file loaded with mixprec::pickle_load, a line
//       each, "<file>\t<value>" (tests/value_dump.h) or "<file>\tERROR <message's first line>"
//   mixprec_checkpoint_interop write DIR      a file through each of mixprec's writers
//       (save_checkpoint, the C ABI's path and stream saves), for Python's torch.load
#include <mixprec/c_api.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cstdio>
#include <iterator>

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

#include "value_dump.h"

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

// ---- tests/python/unpickle_interop.py ---------------------------------------------------------

int write_files(const std::string& dir) {
  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                              torch::nn::Linear(4, 2));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(256.0));
  model->forward(torch::randn({5, 3})).sum().backward();
  adam.step();
  mixprec::save_checkpoint(dir + "/written_checkpoint.pt", *model, adam, scaler);
  mixprec::pickle_save_untagged(scaler.state_dict(), dir + "/written_scaler_state.pt");
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

int dump(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
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

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "dump") return dump(argc, argv);
  if (argc == 3 && std::string(argv[1]) == "write") return write_files(argv[2]);
  at::set_num_threads(1);  // as the Python side: the same reduction order in every kernel
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "mixprec_checkpoint_interop: " << e.what() << "\n";
    return 2;
  }
}
