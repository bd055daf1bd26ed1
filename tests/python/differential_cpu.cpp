// mixprec_python_differential: the C++ half of tests/python/differential_cpu.py, which checks
// mixprec against PyTorch itself (python3-torch >= 2.4) on the CPU, in fp32.
//
// Why: the GoogleTest suites compare mixprec with rules transcribed from PyTorch; this program and
// its driver compare it with the real torch.amp.GradScaler("cpu") and real torch.optim optimizers
// on the same model, data, injected overflows, clipping and accumulation, and exchange
// checkpoints both ways (C++ torch::pickle_save <-> Python torch.load / torch.save).
//
// Usage:
//   mixprec_python_differential train <folder>    the scenarios of meta.txt (see below)
//   mixprec_python_differential archive <folder>  the optimizer-archive round trip (see run_archive)
//
// <folder>/meta.txt: "key value..." lines: in_dim hidden out_dim batch accum steps init_scale
// growth_interval max_norm mid inf_steps grad_inf_steps scenarios, and for each scenario S the line
// "scenario_S OPT1 OPT2 CLIP_EVERY" (OPT: sgd | adam | fadamw; OPT1 gets l1's parameters, OPT2
// l2's; unscale_ + clip_grad_norm_ on steps with step % CLIP_EVERY == 0, never if 0).
// params_init.bin, x.bin [steps, accum, batch, in], y.bin [steps, accum, batch, out]: float32 LE.
// Per step: zero_grad both; `accum` micro-batches, each loss / accum scaled and backward (on an
// inf step, micro-batch step % accum gets x[0][0] = +inf); on a grad-inf step l2.bias.grad[0] =
// +inf (only OPT2 sees the overflow); optional unscale_ both + clip; step both; update.
// Writes cpp_S_trace.txt (one line per step: scale tracker found1 found2 unchanged1 unchanged2
// total_norm), cpp_S_params.bin (final parameters) and cpp_S_sd_mid.pt / cpp_S_sd_final.pt
// (torch::pickle_save(scaler.state_dict()) after update() of step `mid` and of the last step),
// and cpp_S_sd_mid_untagged.pt (the same dict pickled without type tags, see below).
// After writing cpp_S_sd_mid.pt it replaces its scaler with a default-constructed one loaded
// from py_S_sd_mid.pt (written by Python's torch.save) and carries on with it.
// Exit code 0 on success, 2 on bad input or an exception.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
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
// torch::pickle_save (TorchScript type tags on the dict) or mixprec::pickle_save_untagged.
void save_state_dict(const mixprec::GradScaler& scaler, const std::string& path, bool tagged) {
  const std::vector<char> bytes = tagged ? torch::pickle_save(scaler.state_dict())
                                         : mixprec::pickle_save_untagged(scaler.state_dict());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

c10::impl::GenericDict load_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

/// The Python side's optimizers, same hyper-parameters (tests/python/differential_cpu.py).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<Tensor>& params) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(params,
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  if (name == "adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-2));
  }
  if (name == "fadamw") {
    return std::make_unique<mixprec::optim::AdamW>(
        params, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  }
  throw std::runtime_error("unknown optimizer '" + name + "'");
}

struct Model {
  torch::nn::Linear l1{nullptr}, l2{nullptr};
  Model(const std::vector<Tensor>& init) {
    l1 = torch::nn::Linear(init[0].size(1), init[0].size(0));
    l2 = torch::nn::Linear(init[2].size(1), init[2].size(0));
    torch::NoGradGuard no_grad;
    l1->weight.copy_(init[0]);
    l1->bias.copy_(init[1]);
    l2->weight.copy_(init[2]);
    l2->bias.copy_(init[3]);
  }
  Tensor forward(const Tensor& x) { return l2->forward(torch::relu(l1->forward(x))); }
  std::vector<Tensor> params() const { return {l1->weight, l1->bias, l2->weight, l2->bias}; }
};

std::vector<Tensor> read_init(const Meta& meta, const std::string& dir) {
  const std::int64_t in = meta_int(meta, "in_dim"), hid = meta_int(meta, "hidden"),
                     out = meta_int(meta, "out_dim");
  const Tensor flat = read_floats(dir + "/params_init.bin", {hid * in + hid + out * hid + out});
  std::vector<Tensor> init;
  std::int64_t offset = 0;
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{hid, in}, {hid}, {out, hid}, {out}}) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    init.push_back(flat.narrow(0, offset, n).reshape(shape).clone());
    offset += n;
  }
  return init;
}

double found_inf_sum(const mixprec::GradScaler& scaler, const torch::optim::Optimizer& opt) {
  double sum = 0;
  for (const auto& entry : scaler.found_inf_per_device(opt)) sum += entry.second.item<double>();
  return sum;
}

bool unchanged(const std::vector<Tensor>& before, const std::vector<Tensor>& after) {
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (!torch::equal(before[i], after[i])) return false;
  }
  return true;
}

std::vector<Tensor> snapshot(const std::vector<Tensor>& params) {
  std::vector<Tensor> copy;
  for (const Tensor& p : params) copy.push_back(p.detach().clone());
  return copy;
}

void run_scenario(const Meta& meta, const std::string& dir, const std::string& name,
                  const std::vector<Tensor>& init, const Tensor& xs, const Tensor& ys) {
  const std::vector<std::string> spec = meta_list(meta, "scenario_" + name);
  if (spec.size() != 3) throw std::runtime_error("scenario_" + name + ": OPT1 OPT2 CLIP_EVERY");
  const std::int64_t steps = meta_int(meta, "steps"), accum = meta_int(meta, "accum"),
                     mid = meta_int(meta, "mid"), clip_every = std::stoll(spec[2]);
  const double max_norm = meta_double(meta, "max_norm");
  std::set<std::int64_t> inf_steps, grad_inf_steps;
  for (const auto& v : meta_list(meta, "inf_steps")) inf_steps.insert(std::stoll(v));
  for (const auto& v : meta_list(meta, "grad_inf_steps")) grad_inf_steps.insert(std::stoll(v));

  Model model(init);
  const std::vector<Tensor> p1{model.l1->weight, model.l1->bias};
  const std::vector<Tensor> p2{model.l2->weight, model.l2->bias};
  auto opt1 = make_optimizer(spec[0], p1);
  auto opt2 = make_optimizer(spec[1], p2);
  auto scaler = std::make_unique<mixprec::GradScaler>(
      mixprec::GradScalerOptions()
          .init_scale(meta_double(meta, "init_scale"))
          .growth_interval(meta_int(meta, "growth_interval")));
  std::ofstream trace(dir + "/cpp_" + name + "_trace.txt");
  for (std::int64_t step = 0; step < steps; ++step) {
    opt1->zero_grad();
    opt2->zero_grad();
    for (std::int64_t j = 0; j < accum; ++j) {
      Tensor x = xs[step][j].clone();
      if (inf_steps.count(step) != 0 && j == step % accum) {
        x.index_put_({0, 0}, std::numeric_limits<float>::infinity());
      }
      const Tensor loss = torch::mse_loss(model.forward(x), ys[step][j]) / static_cast<double>(accum);
      scaler->scale(loss).backward();
    }
    if (grad_inf_steps.count(step) != 0) {
      torch::NoGradGuard no_grad;
      Tensor grad = model.l2->bias.grad();
      grad.index_put_({0}, std::numeric_limits<float>::infinity());
    }
    double total_norm = -1;  // -1: not clipped this step
    if (clip_every > 0 && step % clip_every == 0) {
      scaler->unscale_(*opt1);
      scaler->unscale_(*opt2);
      total_norm = torch::nn::utils::clip_grad_norm_(model.params(), max_norm);
    }
    const auto before1 = snapshot(p1), before2 = snapshot(p2);
    scaler->step(*opt1);
    scaler->step(*opt2);
    const double found1 = found_inf_sum(*scaler, *opt1), found2 = found_inf_sum(*scaler, *opt2);
    const bool same1 = unchanged(before1, p1), same2 = unchanged(before2, p2);
    scaler->update();
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%.17g %lld %g %g %d %d %.9g\n", scaler->get_scale(),
                  static_cast<long long>(scaler->get_growth_tracker()), found1, found2,
                  same1 ? 1 : 0, same2 ? 1 : 0, total_norm);
    trace << buf;
    if (step == mid) {
      save_state_dict(*scaler, dir + "/cpp_" + name + "_sd_mid.pt", /*tagged=*/true);
      save_state_dict(*scaler, dir + "/cpp_" + name + "_sd_mid_untagged.pt", /*tagged=*/false);
      auto resumed = std::make_unique<mixprec::GradScaler>();  // default options on purpose
      resumed->load_state_dict(load_state_dict(dir + "/py_" + name + "_sd_mid.pt"));
      scaler = std::move(resumed);
    }
  }
  save_state_dict(*scaler, dir + "/cpp_" + name + "_sd_final.pt", /*tagged=*/false);
  if (!trace) throw std::runtime_error("cannot write the trace of " + name);
  write_floats(dir + "/cpp_" + name + "_params.bin", model.params());
}

/// Grads of the model on micro-batch (step, 0), plain fp32 (no scaler).
void plain_backward(Model& model, const Tensor& xs, const Tensor& ys, std::int64_t step) {
  for (const Tensor& p : model.params()) p.mutable_grad() = Tensor();
  torch::mse_loss(model.forward(xs[step][0]), ys[step][0]).backward();
}

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

/// The optimizer-archive round trip on LibTorch 2.6: mixprec::optim::AdamW trained 6 steps with
/// a GradScaler (an inf at step 2: a skipped step), saved with torch::save to cpp_adamw_optim.pt
/// (its parameters to cpp_adamw_params_saved.bin; Python inspects both). Then 3 more plain steps
/// three ways from that point: the original optimizer (reference), a fresh mixprec::optim::AdamW
/// loaded from the archive (must match the reference bit for bit) and a torch::optim::AdamW loaded
/// from it (same state tensors and step count after loading; parameters within 1e-6 of the
/// reference: it rounds differently from the fused kernel). Prints one line per check; exit 1 on
/// a failed check.
int run_archive(const Meta& meta, const std::string& dir) {
  const std::vector<Tensor> init = read_init(meta, dir);
  const std::int64_t steps = meta_int(meta, "steps"), accum = meta_int(meta, "accum"),
                     batch = meta_int(meta, "batch");
  const Tensor xs = read_floats(dir + "/x.bin", {steps, accum, batch, meta_int(meta, "in_dim")});
  const Tensor ys = read_floats(dir + "/y.bin", {steps, accum, batch, meta_int(meta, "out_dim")});
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.01);
  Model model(init);
  mixprec::optim::AdamW opt(model.params(), options);
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(1024));
  for (std::int64_t step = 0; step < 6; ++step) {
    opt.zero_grad();
    Tensor x = xs[step][0].clone();
    if (step == 2) x.index_put_({0, 0}, std::numeric_limits<float>::infinity());
    scaler.scale(torch::mse_loss(model.forward(x), ys[step][0])).backward();
    scaler.step(opt);
    scaler.update();
  }
  const std::string archive = dir + "/cpp_adamw_optim.pt";
  torch::save(opt, archive);
  write_floats(dir + "/cpp_adamw_params_saved.bin", model.params());
  const std::vector<Tensor> saved = snapshot(model.params());

  Model fused_model(saved), torch_model(saved);
  mixprec::optim::AdamW fused_loaded(fused_model.params(), options);
  torch::optim::AdamW torch_loaded(torch_model.params(), options);
  torch::load(fused_loaded, archive);
  torch::load(torch_loaded, archive);

  bool ok = true;
  // torch::optim::AdamW must have read one state per parameter, each with mixprec's step count
  // (the state values are checked by the next steps below).
  std::int64_t torch_step = -1;
  std::size_t states = 0, steps_ok = 0;
  for (const auto& kv : torch_loaded.state()) {
    torch_step = static_cast<torch::optim::AdamWParamState&>(*kv.second).step();
    ++states;
    steps_ok += torch_step == 5 ? 1 : 0;
  }
  const bool state_ok = states == 4 && steps_ok == 4;
  std::cout << (state_ok ? "PASS" : "FAIL") << " archive: torch::optim::AdamW loaded " << states
            << " states (4 expected), step count " << torch_step << " (6 steps, one skipped: 5)\n";
  ok = ok && state_ok;

  for (std::int64_t step = 6; step < 9; ++step) {
    for (Model* m : {&model, &fused_model, &torch_model}) plain_backward(*m, xs, ys, step);
    opt.step();
    fused_loaded.step();
    torch_loaded.step();
  }
  const double fused_diff = max_abs_diff(fused_model.params(), model.params());
  const double torch_diff = max_abs_diff(torch_model.params(), model.params());
  const double moved = max_abs_diff(model.params(), saved);
  std::printf("%s archive: mixprec AdamW loaded vs uninterrupted, 3 steps: max|diff| = %g "
              "(must be 0; params moved %g)\n",
              fused_diff == 0 && moved > 0 ? "PASS" : "FAIL", fused_diff, moved);
  std::printf("%s archive: torch::optim::AdamW loaded vs uninterrupted mixprec, 3 steps: "
              "max|diff| = %g (tolerance 1e-6)\n", torch_diff <= 1e-6 ? "PASS" : "FAIL",
              torch_diff);
  ok = ok && fused_diff == 0 && moved > 0 && torch_diff <= 1e-6;
  return ok ? 0 : 1;
}

}  // namespace

// clip_differential.cpp: the `clip` mode, for clip_differential.py.
int run_clip_differential(const std::string& dir);

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "train" && mode != "archive" && mode != "clip") {
    std::cerr << "usage: " << argv[0]
              << " train|archive|clip <folder written by differential_cpu.py or "
                 "clip_differential.py>\n";
    return 2;
  }
  if (mode == "clip") {
    try {
      return run_clip_differential(argv[2]);
    } catch (const std::exception& e) {
      std::cerr << "mixprec_python_differential clip: " << e.what() << "\n";
      return 2;
    }
  }
  torch::set_num_threads(1);  // as the Python side: same reduction order in every kernel
  try {
    const std::string dir = argv[2];
    const Meta meta = read_meta(dir + "/meta.txt");
    if (mode == "archive") return run_archive(meta, dir);
    const std::vector<Tensor> init = read_init(meta, dir);
    const std::int64_t steps = meta_int(meta, "steps"), accum = meta_int(meta, "accum"),
                       batch = meta_int(meta, "batch");
    const Tensor xs = read_floats(dir + "/x.bin", {steps, accum, batch, meta_int(meta, "in_dim")});
    const Tensor ys = read_floats(dir + "/y.bin", {steps, accum, batch, meta_int(meta, "out_dim")});
    for (const std::string& name : meta_list(meta, "scenarios")) {
      run_scenario(meta, dir, name, init, xs, ys);
      std::cout << "mixprec_python_differential: scenario " << name << " done\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "mixprec_python_differential: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
