// Internal helpers shared by the fused LibTorch optimizers (src/torch/optim/*.cpp): GradScaler's
// grad_scale/found_inf where the kernels read them, parameters grouped by device, the device step
// counts of CUDA parameters, and views of a parameter, its gradient and its state whose element i
// belongs to the same parameter element.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/amp_optimizer.h"
#include "mixprec/core/error.h"
#include "torch/views.h"

namespace mixprec::optim::detail {

/// Optimizer::state()'s map and its key (std::string in LibTorch 1.13, void* in 2.x).
using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
using StateKey = StateMap::key_type;

/// GradScaler's tensors (grad_scale, found_inf, clip_coef) where a kernel on a given device reads them: host floats for the
/// CPU kernels; tensors on the parameters' GPU for the CUDA kernels, copied there without
/// waiting when they live elsewhere (the copies stay alive as long as this object).
class AmpScalars {
 public:
  AmpScalars(const SupportsAmpScaling& amp, const char* who)
      : grad_scale_(checked(amp.grad_scale, "grad_scale", who)),
        found_inf_(checked(amp.found_inf, "found_inf", who)),
        clip_coef_(checked(amp.clip_coef, "clip_coef", who)) {}

  /// Null when the optimizer's grad_scale is undefined (grads are not scaled).
  const float* grad_scale(const c10::Device& device) { return on(grad_scale_, device); }
  /// Null when the optimizer's found_inf is undefined (never skip).
  const float* found_inf(const c10::Device& device) { return on(found_inf_, device); }
  /// Null when the optimizer's clip_coef is undefined (no clip).
  const float* clip_coef(const c10::Device& device) { return on(clip_coef_, device); }

 private:
  static at::Tensor checked(const at::Tensor& t, const char* name, const char* who) {
    TORCH_CHECK(!t.defined() || t.numel() == 1, who, ": ", name,
                " must be a 1-element tensor, got ", t.numel(), " elements.");
    return t;
  }
  const float* on(const at::Tensor& t, const c10::Device& device) {
    if (!t.defined()) return nullptr;
    // On the CPU this is the tensor itself: the kernel reads the value GradScaler wrote. A CUDA
    // tensor read by a CPU kernel is copied to the host, which waits for it.
    kept_.push_back(t.to(device, at::kFloat, /*non_blocking=*/device.is_cuda()).contiguous());
    return kept_.back().data_ptr<float>();
  }

  at::Tensor grad_scale_;
  at::Tensor found_inf_;
  at::Tensor clip_coef_;
  std::vector<at::Tensor> kept_;
};

/// The parameters of `params` that have a gradient, grouped by device in first-seen order:
/// each fused kernel call runs on one device.
inline std::vector<std::pair<c10::Device, std::vector<at::Tensor>>> by_device(
    const std::vector<at::Tensor>& params) {
  std::vector<std::pair<c10::Device, std::vector<at::Tensor>>> groups;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == p.device(); });
    if (it == groups.end()) it = groups.insert(groups.end(), {p.device(), {}});
    it->second.push_back(p);
  }
  return groups;
}

// Note [Step counts of CUDA parameters]
// The CUDA kernels decide on the device whether a step applies, so the host cannot advance
// LibTorch's int64 step(). As PyTorch's fused optimizers keep `state_steps` as tensors, a CUDA
// parameter's state carries its count as an int64 tensor on the parameter's device
// (DeviceStepState), which the kernels read and advance. The state is filed when first made,
// also if that first step is then skipped: its count is 0 and its moments zero, which the next
// step treats exactly as a missing state. save() writes the device count as LibTorch's step (a
// read that waits for the device); a state LibTorch made (load(), a torch::optim optimizer) is
// converted on the next step, its count taken from step() (SGD: 1, the buffer has history).

/// A LibTorch parameter state (Adam(W)ParamState, SGDParamState) plus the device step count.
template <typename Base>
class DeviceStepState final : public Base {
 public:
  DeviceStepState(const Base& base, at::Tensor count) : Base(base), count_(std::move(count)) {}

  /// The device pointer the kernels read and advance.
  std::int64_t* count() { return count_.data_ptr<std::int64_t>(); }
  /// The count, read to the host (waits for the device).
  std::int64_t host_count() const { return count_.item<std::int64_t>(); }

  /// Shares the tensors, count included, as LibTorch's clone() shares the moments.
  std::unique_ptr<torch::optim::OptimizerParamState> clone() const override {
    return std::make_unique<DeviceStepState>(static_cast<const Base&>(*this), count_);
  }
  /// Writes Base's format with the device count as its step.
  void serialize(torch::serialize::OutputArchive& archive) const override {
    if constexpr (kHasStep) {
      Base copy(*this);  // shares the tensors
      copy.step(host_count());
      copy.serialize(archive);
    } else {
      Base::serialize(archive);
    }
  }
  void serialize(torch::serialize::InputArchive& archive) override { Base::serialize(archive); }

 private:
  static constexpr bool kHasStep = !std::is_same_v<Base, torch::optim::SGDParamState>;

  at::Tensor count_;
};

/// The state of CUDA parameter `param` under `key`: `make()` builds a fresh Base (filed at once,
/// see Note [Step counts of CUDA parameters]); a state of another kind is converted.
template <typename Base, typename Make>
DeviceStepState<Base>& device_state(StateMap& all_state, const StateKey& key,
                                    const at::Tensor& param, const Make& make) {
  auto found = all_state.find(key);
  if (found != all_state.end()) {
    if (auto* state = dynamic_cast<DeviceStepState<Base>*>(found->second.get())) return *state;
  }
  const auto on_device = at::TensorOptions().dtype(at::kLong).device(param.device());
  std::unique_ptr<DeviceStepState<Base>> state;
  if (found == all_state.end()) {
    state = std::make_unique<DeviceStepState<Base>>(make(), at::zeros({}, on_device));
  } else {
    const auto& base = static_cast<const Base&>(*found->second);
    std::int64_t count = 1;
    if constexpr (!std::is_same_v<Base, torch::optim::SGDParamState>) count = base.step();
    state = std::make_unique<DeviceStepState<Base>>(base, at::full({}, count, on_device));
  }
  DeviceStepState<Base>& ref = *state;
  all_state[key] = std::move(state);
  return ref;
}

/// The state under `key` for a CPU step, or null: a DeviceStepState (the parameter was on a GPU
/// before) becomes a plain Base again, its step read from the device.
template <typename Base>
Base* host_state(StateMap& all_state, const StateKey& key) {
  auto found = all_state.find(key);
  if (found == all_state.end()) return nullptr;
  if (auto* state = dynamic_cast<DeviceStepState<Base>*>(found->second.get())) {
    auto plain = std::make_unique<Base>(static_cast<const Base&>(*state));
    if constexpr (!std::is_same_v<Base, torch::optim::SGDParamState>) {
      plain->step(state->host_count());
    }
    found->second = std::move(plain);
  }
  return static_cast<Base*>(found->second.get());
}

/// Views over tensors of one parameter (the parameter first) whose element i matches across
/// them. Tensors already sharing the parameter's dense layout are viewed in place; otherwise
/// every non-contiguous one goes through a contiguous copy that write_back() copies back.
class ElementwiseViews {
 public:
  /// Views of `tensors`, in order; all must have the sizes of tensors[0].
  std::vector<core::TensorView> add(const std::vector<at::Tensor>& tensors, const char* who) {
    const at::Tensor& param = tensors.front();
    bool same_layout = param.is_non_overlapping_and_dense();
    for (const at::Tensor& t : tensors) {
      TORCH_CHECK(t.sizes() == param.sizes(), who, ": a gradient or state tensor has sizes ",
                  t.sizes(), " but its parameter has ", param.sizes());
      same_layout = same_layout && t.is_non_overlapping_and_dense() &&
                    (t.numel() <= 1 || t.strides() == param.strides());
    }
    std::vector<core::TensorView> views;
    views.reserve(tensors.size());
    for (const at::Tensor& t : tensors) {
      written_.push_back(t);
      if (same_layout || t.is_contiguous()) {
        views.push_back(mixprec::detail::to_view(t, who));
      } else {
        staged_.emplace_back(t, t.contiguous());
        views.push_back(mixprec::detail::to_view(staged_.back().second, who));
      }
    }
    return views;
  }

  /// Copies the staged buffers back into their tensors (call after an applied step).
  void write_back() {
    c10::NoGradGuard no_grad;
    for (auto& [original, dense] : staged_) original.copy_(dense);
    staged_.clear();
  }

  /// Bumps the version of every tensor given to add(), as PyTorch's in-place fused kernels do
  /// (whether or not found_inf skipped the step). Call once the kernel was called.
  void bump_versions() const {
    for (const at::Tensor& t : written_) mixprec::detail::bump_version(t);
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> staged_;
  std::vector<at::Tensor> written_;
};

/// The key LibTorch files a parameter's state under in Optimizer::state(): its TensorImpl's
/// address, printed to a string in LibTorch 1.13, the pointer itself (void*) in 2.x.
template <typename Key = StateKey>
Key state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;  // what c10::guts::to_string() gives
    address << param.unsafeGetTensorImpl();
    return address.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

/// Runs the closure with gradients enabled, as LibTorch's step(); an undefined tensor if none.
inline at::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

/// Calls `kernel(stream)` on `device` (mixprec::detail::on_device), turning a core::Error into a
/// c10::Error that names `who`; returns what the kernel returned.
template <typename Kernel>
bool call_kernel(const char* who, const c10::Device& device, const Kernel& kernel) {
  bool result = false;
  mixprec::detail::on_device(device, [&](void* stream) {
    try {
      result = kernel(stream);
    } catch (const core::Error& e) {
      TORCH_CHECK(false, who, ": ", e.what());
    }
  });
  return result;
}

}  // namespace mixprec::optim::detail
