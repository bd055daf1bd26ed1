// The binding side of tests/python/c_api_interop.py: trains as a LibTorch binding does, making
// its tensors and optimizers with LibTorch and reaching mixprec only through the C ABI (it links
// mixprec::c, not mixprec::mixprec). Usage: mixprec_c_api_interop optimizer|grads DIR
//   optimizer  torch::optim::SGD (momentum) stepped by mixprec_grad_scaler_step
//   grads      mixprec_grad_scaler_unscale_grads_, then the binding's own plain SGD update
// Writes DIR/trace_<path>.txt (scale, tracker, stepped per step), params_<path>.bin,
// c_state_<path>.pt (mixprec_grad_scaler_state_dict's bytes) and loaded_<path>.txt (the scale and
// tracker of a scaler loaded from Python's py_state_<path>.pt).
#include <mixprec/c_api.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "differential_io.h"

namespace {

namespace io = mixprec::differential;

// A failing mixprec_* call ends the program with its message, as a binding raises it.
void check(int status, const char* what) {
  if (status != MIXPREC_OK) {
    throw std::runtime_error(std::string(what) + " failed (" + std::to_string(status) +
                             "): " + mixprec_last_error());
  }
}

// A tensor the API returned, moved out of its heap handle (which is freed, as at_free does).
torch::Tensor take(void* handle) {
  torch::Tensor t = *static_cast<torch::Tensor*>(handle);
  mixprec_tensor_free(handle);
  return t;
}

bool contains(const std::vector<std::string>& steps, std::int64_t step) {
  for (const std::string& s : steps) {
    if (std::stoll(s) == step) return true;
  }
  return false;
}

void run(const std::string& path, const std::string& dir) {
  const io::Meta meta = io::read_meta(dir + "/meta.txt");
  const std::int64_t in = io::meta_int(meta, "in_dim"), hidden = io::meta_int(meta, "hidden"),
                     out = io::meta_int(meta, "out_dim"), batch = io::meta_int(meta, "batch"),
                     steps = io::meta_int(meta, "steps");
  const double lr = io::meta_double(meta, "lr");
  torch::nn::Linear l1(in, hidden), l2(hidden, out);
  std::vector<torch::Tensor> params = {l1->weight, l1->bias, l2->weight, l2->bias};
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor init = io::read_floats(dir + "/params_init.bin",
                                               {hidden * in + hidden + out * hidden + out});
    std::int64_t offset = 0;
    for (torch::Tensor& p : params) {
      p.copy_(init.slice(0, offset, offset + p.numel()).view_as(p));
      offset += p.numel();
    }
  }
  const torch::Tensor x = io::read_floats(dir + "/x.bin", {steps, batch, in});
  const torch::Tensor y = io::read_floats(dir + "/y.bin", {steps, batch, out});

  mixprec_grad_scaler_options options;
  mixprec_grad_scaler_options_default(&options);
  mixprec_grad_scaler_options_set_init_scale(&options, io::meta_double(meta, "init_scale"));
  mixprec_grad_scaler_options_set_growth_interval(&options, io::meta_int(meta, "growth_interval"));
  mixprec_grad_scaler* scaler = nullptr;
  check(mixprec_grad_scaler_create(&options, &scaler), "create");
  torch::optim::Optimizer* optimizer = new torch::optim::SGD(
      params, torch::optim::SGDOptions(lr).momentum(
                  path == "optimizer" ? io::meta_double(meta, "momentum") : 0.0));
  std::ofstream trace(dir + "/trace_" + path + ".txt");
  for (std::int64_t step = 0; step < steps; ++step) {
    optimizer->zero_grad();
    torch::Tensor loss = torch::mse_loss(l2->forward(torch::relu(l1->forward(x[step]))), y[step]);
    void* scaled = nullptr;
    check(mixprec_grad_scaler_scale(scaler, &loss, &scaled), "scale");
    take(scaled).backward();
    {
      torch::NoGradGuard no_grad;
      if (contains(io::meta_list(meta, "inf_steps"), step)) {
        params[0].mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
      }
      if (contains(io::meta_list(meta, "nan_steps"), step)) {
        params[2].mutable_grad()[1][1] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    int stepped = 0;
    if (path == "optimizer") {
      check(mixprec_grad_scaler_step(scaler, optimizer, &stepped), "step");
    } else {
      std::vector<torch::Tensor> grads;
      for (torch::Tensor& p : params) grads.push_back(p.grad());
      std::vector<void*> handles;
      for (torch::Tensor& g : grads) handles.push_back(&g);
      void* found_inf = nullptr;
      check(mixprec_grad_scaler_unscale_grads_(scaler, handles.data(), handles.size(), &found_inf),
            "unscale_grads_");
      stepped = take(found_inf).item<float>() == 0.0f ? 1 : 0;
      torch::NoGradGuard no_grad;
      if (stepped) {
        for (torch::Tensor& p : params) p.add_(p.grad(), -lr);  // the binding's own SGD
      }
    }
    check(mixprec_grad_scaler_update(scaler), "update");
    double scale = 0.0;
    int64_t tracker = 0;
    check(mixprec_grad_scaler_get_scale(scaler, &scale), "get_scale");
    check(mixprec_grad_scaler_get_growth_tracker(scaler, &tracker), "get_growth_tracker");
    char line[64];
    std::snprintf(line, sizeof(line), "%.17g %lld %d\n", scale, static_cast<long long>(tracker),
                  stepped);
    trace << line;
  }
  io::write_floats(dir + "/params_" + path + ".bin", params);

  size_t size = 0;
  check(mixprec_grad_scaler_state_dict(scaler, nullptr, 0, &size), "state_dict (size)");
  std::vector<char> bytes(size);
  check(mixprec_grad_scaler_state_dict(scaler, bytes.data(), bytes.size(), &size), "state_dict");
  std::ofstream(dir + "/c_state_" + path + ".pt", std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(size));

  std::ifstream py(dir + "/py_state_" + path + ".pt", std::ios::binary);
  const std::vector<char> py_bytes((std::istreambuf_iterator<char>(py)),
                                   std::istreambuf_iterator<char>());
  mixprec_grad_scaler* loaded = nullptr;
  check(mixprec_grad_scaler_create(nullptr, &loaded), "create (defaults)");
  check(mixprec_grad_scaler_load_state_dict(loaded, py_bytes.data(), py_bytes.size()),
        "load_state_dict");
  double scale = 0.0;
  int64_t tracker = 0;
  check(mixprec_grad_scaler_get_scale(loaded, &scale), "get_scale");
  check(mixprec_grad_scaler_get_growth_tracker(loaded, &tracker), "get_growth_tracker");
  char line[64];
  std::snprintf(line, sizeof(line), "%.17g %lld", scale, static_cast<long long>(tracker));
  std::ofstream(dir + "/loaded_" + path + ".txt") << line;
  mixprec_grad_scaler_destroy(loaded);
  mixprec_grad_scaler_destroy(scaler);
  delete optimizer;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: mixprec_c_api_interop optimizer|grads DIR\n";
    return 2;
  }
  try {
    torch::set_num_threads(1);
    run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "mixprec_c_api_interop: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
