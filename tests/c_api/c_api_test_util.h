// Helpers of the C ABI tests: what a binding keeps around the C calls (owned handles, status
// checks, its two optimizer conventions), and the C++ equivalents the tests compare with.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "message_of.h"
#include "mixprec/c_api.h"
#include "mixprec/grad_scaler.h"
#include "torch/without_backtrace.h"

namespace mixprec::c_api_test {

/// Throws, naming the call and quoting mixprec_last_error(), unless `rc` is MIXPREC_OK: the test
/// stops there and GoogleTest reports the message (as a binding turns a status into an exception).
inline void c_ok(int rc, const char* call) {
  if (rc != MIXPREC_OK) {
    throw std::runtime_error(std::string(call) + " returned " + std::to_string(rc) + ": " +
                             mixprec_last_error());
  }
}
#define MIXPREC_C_OK(call) ::mixprec::c_api_test::c_ok((call), #call)

/// The message C++ code throws, as the C layer reports it: c10::Error's text without its
/// backtrace, or what() of another exception. Fails the test if `f` does not throw.
template <typename F>
std::string cpp_message(F&& f) {
  const auto message = mixprec::test::message_of(std::forward<F>(f), WithoutBacktrace{});
  if (!message) ADD_FAILURE() << "the C++ reference did not throw";
  return message.value_or("<no C++ exception>");
}

/// Calls `f` from a noexcept function: an exception escaping the C API would terminate here.
template <typename F>
int call_noexcept(F&& f) noexcept {
  return f();
}

/// Checks that `call`, made from a noexcept function, fails with `status` and that the last
/// error is exactly `message`.
#define EXPECT_C_FAILS_WITH(call, status, message)                                           \
  do {                                                                                       \
    const int rc_ = ::mixprec::c_api_test::call_noexcept([&]() noexcept { return (call); }); \
    EXPECT_EQ(rc_, (status)) << #call;                                                       \
    EXPECT_EQ(std::string(mixprec_last_error()), (message)) << #call;                        \
    EXPECT_NE(std::string(mixprec_last_error()), "") << #call;                               \
  } while (false)

/// A scaler handle released by mixprec_grad_scaler_destroy, as a binding's finalizer does.
using CScaler = std::unique_ptr<mixprec_grad_scaler, void (*)(mixprec_grad_scaler*)>;

inline CScaler make_c_scaler(const mixprec_grad_scaler_options* options) {
  mixprec_grad_scaler* s = nullptr;
  MIXPREC_C_OK(mixprec_grad_scaler_create(options, &s));
  return CScaler(s, &mixprec_grad_scaler_destroy);
}

/// A torch::Tensor* the C API returned, owned by the test and freed with mixprec_tensor_free.
class OwnedTensor {
 public:
  explicit OwnedTensor(void* handle = nullptr) : handle_(handle) {}
  OwnedTensor(OwnedTensor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  OwnedTensor& operator=(OwnedTensor&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~OwnedTensor() { mixprec_tensor_free(handle_); }
  void** out() { return &handle_; }  ///< for an out_tensor argument (the handle must be empty)
  bool empty() const { return handle_ == nullptr; }
  /// The tensor behind the handle (undefined for an empty handle).
  torch::Tensor get() const {
    return handle_ == nullptr ? torch::Tensor() : *static_cast<torch::Tensor*>(handle_);
  }

 private:
  void* handle_;
};

/// The scaler's options, in C (the struct filled by _default, then set) and in C++.
struct ScalerConfig {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;
  // Beyond PyTorch: the C struct's further fields (their defaults are GradScalerOptions').
  std::int32_t hysteresis = 1;
  bool refill_on_clean_step = false;
  double min_scale = 0.0;
  double max_scale = GradScalerOptions().max_scale();
  bool error_at_min_scale = false;
  std::int64_t history_size = 0;

  mixprec_grad_scaler_options c() const {
    mixprec_grad_scaler_options o;
    mixprec_grad_scaler_options_default(&o);
    mixprec_grad_scaler_options_set_init_scale(&o, init_scale);
    mixprec_grad_scaler_options_set_growth_factor(&o, growth_factor);
    mixprec_grad_scaler_options_set_backoff_factor(&o, backoff_factor);
    mixprec_grad_scaler_options_set_growth_interval(&o, growth_interval);
    mixprec_grad_scaler_options_set_enabled(&o, enabled ? 1 : 0);
    o.hysteresis = hysteresis;
    o.hysteresis_refill = refill_on_clean_step ? MIXPREC_HYSTERESIS_REFILL_ON_CLEAN_STEP
                                               : MIXPREC_HYSTERESIS_REFILL_ON_GROWTH;
    o.min_scale = min_scale;
    o.max_scale = max_scale;
    o.at_min_scale = error_at_min_scale ? MIXPREC_AT_MIN_SCALE_ERROR : MIXPREC_AT_MIN_SCALE_CLAMP;
    o.history_size = history_size;
    return o;
  }
  GradScalerOptions cpp() const {
    return GradScalerOptions()
        .init_scale(init_scale)
        .growth_factor(growth_factor)
        .backoff_factor(backoff_factor)
        .growth_interval(growth_interval)
        .enabled(enabled)
        .hysteresis(hysteresis)
        .hysteresis_refill(refill_on_clean_step ? core::HysteresisRefill::kOnCleanStep
                                                : core::HysteresisRefill::kOnGrowth)
        .min_scale(min_scale)
        .max_scale(max_scale)
        .at_min_scale(error_at_min_scale ? AtMinScale::kThrow : AtMinScale::kClamp)
        .history_size(history_size);
  }
};

/// Same dtype, shape and bits (NaN payloads and signed zeros included), or both undefined.
inline bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (a.scalar_type() == torch::kFloat) {
    return torch::equal(a.contiguous().view(torch::kInt), b.contiguous().view(torch::kInt));
  }
  return torch::equal(a, b);
}

/// The bindings' two optimizer conventions.
enum class Convention { kRaw, kShared };

/// How GoogleTest names a Convention parameter (also in CTest's test names).
inline void PrintTo(Convention c, std::ostream* os) {
  *os << (c == Convention::kRaw ? "raw" : "shared");
}

/// An optimizer handle as a binding holds one: a torch::optim::Optimizer* (tch-rs) or a
/// std::shared_ptr<torch::optim::Optimizer>* (TorchSharp), released by the given call.
class COptimizer {
 public:
  COptimizer(void* handle, Convention convention, void (*release)(void*))
      : handle_(handle), convention_(convention), release_(release) {}
  /// Takes over an optimizer the binding made itself (heap-allocated in its convention).
  static COptimizer adopt(std::unique_ptr<torch::optim::Optimizer> optimizer,
                          Convention convention) {
    if (convention == Convention::kRaw) {
      return COptimizer(optimizer.release(), convention,
                        [](void* h) { delete static_cast<torch::optim::Optimizer*>(h); });
    }
    return COptimizer(
        new std::shared_ptr<torch::optim::Optimizer>(std::move(optimizer)), convention,
        [](void* h) { delete static_cast<std::shared_ptr<torch::optim::Optimizer>*>(h); });
  }
  COptimizer(COptimizer&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)),
        convention_(other.convention_),
        release_(other.release_) {}
  COptimizer& operator=(COptimizer&&) = delete;
  ~COptimizer() {
    if (handle_ != nullptr) release_(handle_);
  }

  void* handle() const { return handle_; }
  bool shared() const { return convention_ == Convention::kShared; }
  /// The optimizer behind the handle, cast back as the binding's own calls do (tch-rs ato_step,
  /// TorchSharp THSNN_Optimizer_step).
  torch::optim::Optimizer& get() const {
    return shared() ? **static_cast<std::shared_ptr<torch::optim::Optimizer>*>(handle_)
                    : *static_cast<torch::optim::Optimizer*>(handle_);
  }

  int unscale_(mixprec_grad_scaler* s) const {
    return shared() ? mixprec_grad_scaler_unscale_shared_(s, handle_)
                    : mixprec_grad_scaler_unscale_(s, handle_);
  }
  int step(mixprec_grad_scaler* s, int* out_stepped) const {
    return shared() ? mixprec_grad_scaler_step_shared(s, handle_, out_stepped)
                    : mixprec_grad_scaler_step(s, handle_, out_stepped);
  }
  int last_step_applied(mixprec_grad_scaler* s, int* out) const {
    return shared() ? mixprec_grad_scaler_last_step_applied_shared(s, handle_, out)
                    : mixprec_grad_scaler_last_step_applied(s, handle_, out);
  }
  int last_step_found_inf(mixprec_grad_scaler* s, void** out) const {
    return shared() ? mixprec_grad_scaler_last_step_found_inf_shared(s, handle_, out)
                    : mixprec_grad_scaler_last_step_found_inf(s, handle_, out);
  }
  int get_lr(double* out) const {
    return shared() ? mixprec_optimizer_get_lr_shared(handle_, out)
                    : mixprec_optimizer_get_lr(handle_, out);
  }
  int set_lr(double lr) const {
    return shared() ? mixprec_optimizer_set_lr_shared(handle_, lr)
                    : mixprec_optimizer_set_lr(handle_, lr);
  }
  int state_dict(void** out_bytes, size_t* out_size) const {
    return shared() ? mixprec_optimizer_state_dict_shared(handle_, out_bytes, out_size)
                    : mixprec_optimizer_state_dict(handle_, out_bytes, out_size);
  }
  int load_state_dict(const void* data, size_t size) const {
    return shared() ? mixprec_optimizer_load_state_dict_shared(handle_, data, size)
                    : mixprec_optimizer_load_state_dict(handle_, data, size);
  }

 private:
  void* handle_;
  Convention convention_;
  void (*release_)(void*);
};

/// The binding's handles to `tensors` (torch::Tensor*, valid while `tensors` lives).
inline std::vector<void*> handles(std::vector<torch::Tensor>& tensors) {
  std::vector<void*> out;
  for (auto& t : tensors) out.push_back(&t);
  return out;
}

/// The C telemetry as the C++ struct, for comparison.
inline ScalerTelemetry c_telemetry(mixprec_grad_scaler* s) {
  mixprec_grad_scaler_telemetry t{};
  t.struct_size = sizeof t;
  MIXPREC_C_OK(mixprec_grad_scaler_get_telemetry(s, &t));
  ScalerTelemetry out;
  out.iterations = t.iterations;
  out.skipped_steps = t.skipped_steps;
  out.growths = t.growths;
  out.backoffs = t.backoffs;
  out.consecutive_overflows = t.consecutive_overflows;
  out.last_overflow_iteration = t.last_overflow_iteration;
  out.hysteresis_tracker = t.hysteresis_tracker;
  return out;
}

inline void expect_same_telemetry(const ScalerTelemetry& c, const ScalerTelemetry& cpp) {
  EXPECT_EQ(c.iterations, cpp.iterations);
  EXPECT_EQ(c.skipped_steps, cpp.skipped_steps);
  EXPECT_EQ(c.growths, cpp.growths);
  EXPECT_EQ(c.backoffs, cpp.backoffs);
  EXPECT_EQ(c.consecutive_overflows, cpp.consecutive_overflows);
  EXPECT_EQ(c.last_overflow_iteration, cpp.last_overflow_iteration);
  EXPECT_EQ(c.hysteresis_tracker, cpp.hysteresis_tracker);
}

}  // namespace mixprec::c_api_test
