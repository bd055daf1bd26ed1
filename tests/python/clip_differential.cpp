// The C++ half of clip_differential.py, the `clip` mode of mixprec_python_differential (one
// program, one precompiled header): reads the cases Python wrote (torch.save of a flat dict, read
// with mixprec's own reader), clips each with mixprec, and writes the norms and the grads back
// (pickle_save_untagged, read in Python with plain torch.load).
//   mixprec_python_differential clip <folder>   (reads <folder>/cases.pt, writes results.pt)
// Keys: "cN.kind" (0 mixprec::clip_grad_norm_; 1 GradScaler::clip_grad_norm_ + torch::optim::SGD;
// 2 GradScaler::clip_grad_norm_ + mixprec::optim::AdamW, then scaler.step), "cN.max_norm",
// "cN.norm_type", "cN.scale" (0-dim float64), "cN.count" (int64), "cN.gK" (the grads).
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/checkpoint.h"
#include "mixprec/clip.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/optim.h"
#include "mixprec/serialize.h"

int run_clip_differential(const std::string& dir) {
  const std::string in = dir + "/cases.pt", out = dir + "/results.pt";
  std::ifstream file(in, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  const c10::impl::GenericDict cases = mixprec::pickle_load(bytes).toGenericDict();
  const auto get = [&](const std::string& key) { return cases.at(key).toTensor(); };
  c10::impl::GenericDict results(c10::StringType::get(), c10::TensorType::get());
  for (int c = 0; cases.contains("c" + std::to_string(c) + ".kind"); ++c) {
    const std::string p = "c" + std::to_string(c) + ".";
    const auto kind = get(p + "kind").item<std::int64_t>();
    const double max_norm = get(p + "max_norm").item<double>();
    const double norm_type = get(p + "norm_type").item<double>();
    const double scale = get(p + "scale").item<double>();
    std::vector<at::Tensor> params;
    for (std::int64_t k = 0; k < get(p + "count").item<std::int64_t>(); ++k) {
      const at::Tensor g = get(p + "g" + std::to_string(k));
      at::Tensor param = torch::zeros_like(g).set_requires_grad(true);
      param.mutable_grad() = g.clone();
      params.push_back(param);
    }
    at::Tensor norm;
    if (kind == 0) {
      norm = mixprec::clip_grad_norm_(params, max_norm, norm_type);
    } else {
      mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(scale));
      scaler.scale(torch::ones({}));
      std::unique_ptr<torch::optim::Optimizer> opt;
      if (kind == 1) {
        opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
      } else {
        opt = std::make_unique<mixprec::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3));
      }
      norm = scaler.clip_grad_norm_(*opt, max_norm, norm_type);
      if (kind == 2) scaler.step(*opt);  // the fused step writes the clipped grads back
    }
    results.insert(p + "norm", norm);
    for (std::size_t k = 0; k < params.size(); ++k) {
      results.insert(p + "g" + std::to_string(k), params[k].grad());
    }
  }
  mixprec::pickle_save_untagged(results, out);
  return 0;
}
