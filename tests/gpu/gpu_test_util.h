// Helpers of the GPU tests (tests/gpu): a small MLP created identically on any device, batches
// with injected infs, one training iteration as users write it, optimizer snapshots, and a guard
// for c10's CUDA sync debug mode. Needs a CUDA LibTorch (MIXPREC_TORCH_CUDA) at link time only.
#pragma once

#include <c10/cuda/CUDAFunctions.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "torch/optim/adapter.h"  // mixprec::optim::detail::state_key

namespace mixprec_gpu_test {

using torch::Tensor;

/// Sets c10's CUDA sync debug mode for a scope and restores the previous mode on exit (also when
/// an exception unwinds). With SyncDebugMode::L_ERROR every synchronizing call c10 knows of
/// (.item(), a blocking device-to-host copy, stream/device synchronize) throws c10::Error.
class SyncDebugModeGuard {
 public:
  explicit SyncDebugModeGuard(c10::cuda::SyncDebugMode mode)
      : previous_(c10::cuda::warning_state().get_sync_debug_mode()) {
    c10::cuda::warning_state().set_sync_debug_mode(mode);
  }
  ~SyncDebugModeGuard() { c10::cuda::warning_state().set_sync_debug_mode(previous_); }
  SyncDebugModeGuard(const SyncDebugModeGuard&) = delete;
  SyncDebugModeGuard& operator=(const SyncDebugModeGuard&) = delete;

 private:
  c10::cuda::SyncDebugMode previous_;
};

/// The key torch::optim uses for a parameter's state (a string in LibTorch 1.13, void* in 2.x).
inline mixprec::optim::detail::StateKey key_of(const Tensor& p) {
  return mixprec::optim::detail::state_key(p);
}

/// Linear(16, 32) -> ReLU -> Linear(32, 4), initialised on the CPU from a fixed seed and then
/// moved, so every device starts from the same values.
inline torch::nn::Sequential make_mlp(torch::Device device, torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(7);
  torch::nn::Sequential net(torch::nn::Linear(16, 32), torch::nn::ReLU(), torch::nn::Linear(32, 4));
  net->to(device, dtype);
  return net;
}

/// Inputs and targets of `steps` iterations, drawn on the CPU from a fixed seed; the input of
/// every step in `inf_steps` holds one +inf, so its gradients overflow on every device.
struct Batches {
  std::vector<Tensor> x, y;
  Batches to(torch::Device device) const {
    Batches out;
    for (const Tensor& t : x) out.x.push_back(t.to(device));
    for (const Tensor& t : y) out.y.push_back(t.to(device));
    return out;
  }
};

inline Batches make_batches(int steps, const std::set<int>& inf_steps, std::uint64_t seed = 11) {
  torch::manual_seed(seed);
  Batches b;
  for (int s = 0; s < steps; ++s) {
    Tensor x = torch::randn({8, 16});
    if (inf_steps.count(s) != 0) x.index_put_({0, 0}, std::numeric_limits<float>::infinity());
    b.x.push_back(x);
    b.y.push_back(torch::randn({8, 4}));
  }
  return b;
}

/// The optimizers the tests drive: LibTorch's SGD (host-synchronising GradScaler path) and the
/// fused mixprec ones (SupportsAmpScaling path).
enum class OptKind { kTorchSgd, kFusedSgd, kFusedAdamW };

inline const char* name_of(OptKind kind) {
  switch (kind) {
    case OptKind::kTorchSgd:
      return "torch::optim::SGD(momentum)";
    case OptKind::kFusedSgd:
      return "mixprec::optim::SGD(momentum)";
    case OptKind::kFusedAdamW:
      return "mixprec::optim::AdamW";
  }
  return "?";
}

inline std::unique_ptr<torch::optim::Optimizer> make_optimizer(OptKind kind,
                                                               std::vector<Tensor> params) {
  const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4);
  const auto adamw = torch::optim::AdamWOptions(1e-2).weight_decay(0.01);
  switch (kind) {
    case OptKind::kTorchSgd:
      return std::make_unique<torch::optim::SGD>(params, sgd);
    case OptKind::kFusedSgd:
      return std::make_unique<mixprec::optim::SGD>(params, sgd);
    case OptKind::kFusedAdamW:
      return std::make_unique<mixprec::optim::AdamW>(params, adamw);
  }
  return nullptr;
}

/// One training iteration as a user writes it: grads set to none (as zero_grad(set_to_none) in
/// LibTorch 2.x, so a CUDA graph capture allocates them in its pool), forward under CUDA autocast
/// (fp16, without the cast cache, which graph capture requires) when `autocast`,
/// scaler.scale(loss).backward(), scaler.step(opt), scaler.update().
inline void iteration(torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                      mixprec::GradScaler& scaler, const Tensor& x, const Tensor& y,
                      bool autocast) {
  for (Tensor& p : net->parameters()) p.mutable_grad() = Tensor();
  Tensor loss;
  {
    mixprec::AutocastGuard guard(torch::kCUDA, torch::kHalf, /*enabled=*/autocast,
                                 /*cache_enabled=*/false);
    loss = torch::mse_loss(net->forward(x), y);
  }
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
}

/// Clones of the optimizer's moment tensors for `params` (AdamW: exp_avg, exp_avg_sq; SGD:
/// momentum_buffer), in parameter order; an undefined tensor where a parameter has no state.
/// Device-side clones only: safe under SyncDebugMode::L_ERROR.
inline std::vector<Tensor> moments(torch::optim::Optimizer& opt,
                                   const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    auto it = opt.state().find(key_of(p));
    if (it == opt.state().end()) {
      out.emplace_back();
    } else if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
      out.push_back(w->exp_avg().clone());
      out.push_back(w->exp_avg_sq().clone());
    } else if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      out.push_back(s->momentum_buffer().clone());
    } else {
      out.emplace_back();
    }
  }
  return out;
}

/// Clones of every parameter (device-side; safe under SyncDebugMode::L_ERROR).
inline std::vector<Tensor> clones(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.detach().clone());
  return out;
}

/// Largest |a - b| over two lists of tensors of the same shapes (on any devices), or +inf when
/// the lists do not match (length, shape, or one tensor undefined and the other not).
inline double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return std::numeric_limits<double>::infinity();
    if (!a[i].defined()) continue;
    if (a[i].sizes() != b[i].sizes()) return std::numeric_limits<double>::infinity();
    const Tensor d = (a[i].detach().to(torch::kCPU, torch::kDouble) -
                      b[i].detach().to(torch::kCPU, torch::kDouble))
                         .abs();
    if (d.numel() == 0) continue;
    const double m = d.max().item<double>();
    if (std::isnan(m)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, m);
  }
  return worst;
}

/// Whether every pair is close: |a - b| <= atol + rtol * |b| element-wise (b is the reference).
inline bool all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double rtol,
                      double atol) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (!a[i].defined()) continue;
    if (!torch::allclose(a[i].detach().to(torch::kCPU, torch::kDouble),
                         b[i].detach().to(torch::kCPU, torch::kDouble), rtol, atol)) {
      return false;
    }
  }
  return true;
}

}  // namespace mixprec_gpu_test
