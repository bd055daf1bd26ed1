// The errors walk's triggers (errors_walk_test.cpp): what a trigger is, and the small programs
// that provoke docs/errors.md's messages through the public API, each returning the message.
// Included by errors_walk_test.cpp only.
#pragma once

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "message_of.h"
#include "mixprec/core/kernels.h"
#include "mixprec/core/optim_kernels.h"
#include "mixprec/mixprec.h"
#include "mixprec/torch_version.h"
#include "torch/warning_capture.h"
#include "torch/without_backtrace.h"
#ifdef MIXPREC_HAS_DISTRIBUTED
#include "mixprec/distributed.h"
#endif

namespace mixprec::errors_walk {

using Action = std::function<std::string()>;  // returns the message it provoked

// The message `f` throws (without LibTorch's backtrace), or a note that it threw nothing.
inline Action thrown(std::function<void()> f) {
  return [f = std::move(f)]() -> std::string {
    return mixprec::test::message_of(f, WithoutBacktrace{}).value_or("<nothing was thrown>");
  };
}

struct Trigger {
  const char* name;             // the test's name
  const char* row;              // the start of the row's first column: which row this triggers
  std::vector<Action> actions;  // one per backticked fragment, in order
  // Where the row does not apply (LibTorch version, build): nullptr, or a check of what happens
  // instead; returns "" where the row applies, else why not (GTEST_SKIP when `skip` is set: such
  // tests are in tests/expected_skips.txt).
  std::function<std::string()> elsewhere = nullptr;
  bool skip = false;
};

// GoogleTest prints a Trigger by its name (found by argument-dependent lookup, so it lives here).
inline void PrintTo(const Trigger& t, std::ostream* os) { *os << t.name; }

// A row that cannot be triggered here: its first column's start, why, and what covers it.
struct Untriggerable {
  const char* row;
  const char* reason;
};

// One parameter with a grad, its optimizer, and a scaler.
struct Model {
  torch::Tensor w = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD opt{std::vector<torch::Tensor>{torch::Tensor(w)}, torch::optim::SGDOptions(1)};
  GradScaler scaler;
  explicit Model(GradScalerOptions o = {}, bool scaled = true) : scaler(std::move(o)) {
    w.mutable_grad() = torch::ones({3});
    if (scaled) scaler.scale(torch::ones({1}));
  }
};

// For a row of one PyTorch version's text: "" where the LibTorch built against is at least
// MAJOR.MINOR (from_version) or older than it (before_version), else why the row does not apply.
inline std::string from_version(int major, int minor, const char* why_not) {
  return MIXPREC_TORCH_AT_LEAST(major, minor) ? std::string() : std::string(why_not);
}
inline std::string before_version(int major, int minor, const char* why_not) {
  return MIXPREC_TORCH_AT_LEAST(major, minor) ? std::string(why_not) : std::string();
}

inline torch::Tensor on_meta(std::int64_t n, torch::Dtype dtype = torch::kFloat) {
  return torch::zeros(n < 0 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{n},
                      torch::TensorOptions().dtype(dtype).device(torch::kMeta));
}

// A 0-dim tensor that says it is on cuda:0, with no memory: what a CPU-only LibTorch can make of
// a CUDA tensor. mixprec must refuse it before reading it.
inline torch::Tensor claims_cuda(c10::ScalarType dtype) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       at::DataPtr(nullptr, c10::Device(c10::kCUDA, 0)), nullptr, false);
  torch::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA),
      c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous({});
  return t;
}

const core::Device kCpu{core::DeviceType::kCPU, -1};
const core::Device kCuda0{core::DeviceType::kCUDA, 0};
inline float buffer[8];  // never read or written: each core call below is refused before it runs
inline core::TensorView view(core::DType dtype = core::DType::kFloat32, core::Device device = kCpu,
                             std::int64_t numel = 8, void* data = buffer) {
  return {data, numel, dtype, device};
}
inline core::SgdTensors sgd(core::TensorView param, core::TensorView grad,
                            core::TensorView buf = {}) {
  return {param, grad, buf};
}
inline core::AdamTensors adam(core::Device device, std::int64_t step = 1) {
  const core::TensorView v = view(core::DType::kFloat32, device);
  return {v, v, v, v, v, step};
}
inline Action fused_sgd(std::vector<core::SgdTensors> t, double momentum = 0.0) {
  return thrown([t, momentum] {
    core::SgdHyper h;
    h.lr = 0.1;
    h.momentum = momentum;
    core::fused_sgd_(t.data(), t.size(), h, nullptr, nullptr);
  });
}
inline Action fused_adam(std::vector<core::AdamTensors> t) {
  return thrown(
      [t] { core::fused_adam_(t.data(), t.size(), core::AdamHyper{}, nullptr, nullptr); });
}

inline Action scaler_with(GradScalerOptions o) {
  return thrown([o] { GradScaler s(o); });
}
inline Action load_with(const char* key, c10::IValue value, bool erase = false) {
  return thrown([=] {
    auto sd = GradScaler(GradScalerOptions().hysteresis(2)).state_dict().copy();
    if (erase)
      EXPECT_EQ(sd.erase(key), 1u);
    else
      sd.insert_or_assign(key, value);
    GradScaler(GradScalerOptions().init_scale(8)).load_state_dict(sd);
  });
}

using test::WarningCapture;
namespace warning_utils = test::warning_utils;

#ifdef MIXPREC_HAS_DISTRIBUTED
// A process group whose collectives fail, as a Gloo or NCCL group's do when a peer died.
struct DeadPeerGroup : c10d::ProcessGroup {
  DeadPeerGroup() : c10d::ProcessGroup(/*rank=*/0, /*size=*/2) {}
  const std::string getBackendName() const override { return "dead-peer"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&,
                                           const c10d::AllreduceOptions&) override {
    throw std::runtime_error("Connection closed by peer");
  }
};
#endif

// An action on a fresh Model.
inline Action on_model(std::function<void(Model&)> f, GradScalerOptions o = {},
                       bool scaled = true) {
  return thrown([=] {
    Model m(o, scaled);
    f(m);
  });
}
// update(tensor) with two elements.
inline Action new_scale_message() {
  return on_model([](Model& m) {
    m.scaler.step(m.opt);
    m.scaler.update(torch::ones({2}));
  });
}
// The warning of AutocastGuard(torch::kCUDA) without a CUDA device.
inline Action autocast_cuda_warning() {
  return [] {
    WarningCapture capture;
    const warning_utils::WarningHandlerGuard handler(&capture);
    const warning_utils::WarnAlways every_time;  // the guard warns once per process
    AutocastGuard guard(torch::kCUDA);
    EXPECT_FALSE(guard.enabled());
    return capture.text;
  };
}
// "" without a CUDA device; with one, checks what happens instead and says so.
inline std::string cuda_autocast_is_on() {
  if (!torch::cuda::is_available()) return std::string();
  EXPECT_TRUE(AutocastGuard(torch::kCUDA).enabled());
  return "a CUDA device is present: CUDA autocast is on";
}
inline Action unscale_args(std::vector<torch::Tensor> grads, torch::Tensor found,
                           torch::Tensor inv) {
  return thrown([=]() mutable { non_finite_check_and_unscale_(grads, found, inv); });
}
inline Action update_args(torch::Tensor scale, torch::Tensor tracker, torch::Tensor found) {
  return thrown([=]() mutable { update_scale_(scale, tracker, found, 2.0, 0.5, 1); });
}
// Saves a fused Adam over `saved` and loads it into one over `loaded`.
inline Action adam_checkpoint(std::vector<torch::optim::OptimizerParamGroup> saved,
                              std::vector<torch::Tensor> loaded) {
  return thrown([=] {
    std::stringstream archive;
    torch::save(optim::Adam(saved), archive);
    optim::Adam adam(loaded);
    torch::load(adam, archive);
  });
}

// Checkpoints (mixprec/checkpoint.h): a one-Linear model's state dict, changed by `edit`, loaded.
template <typename Edit>
inline Action model_load(Edit edit) {
  return thrown([edit] {
    torch::nn::Linear model(1, 1);
    auto sd = module_state_dict(*model);
    edit(sd);
    load_module_state_dict(*model, sd);
  });
}
// An Adam's state dict after one step, its first group and first state changed by `edit`, loaded.
template <typename Edit>
inline Action optimizer_load(Edit edit) {
  return thrown([edit] {
    torch::nn::Linear model(1, 1);
    torch::optim::Adam opt(model->parameters());
    model->forward(torch::ones({1, 1})).sum().backward();
    opt.step();
    auto sd = optimizer_state_dict(opt);
    auto group = sd.at("param_groups").toListRef()[0].toGenericDict();
    auto state = sd.at("state").toGenericDict().at(std::int64_t{0}).toGenericDict();
    edit(group, state);
    load_optimizer_state_dict(opt, sd);
  });
}
template <typename F>
inline Action checkpoint_file(F f) {
  return thrown([f] {
    torch::nn::Linear model(1, 1);
    torch::optim::SGD opt(model->parameters(), 0.1);
    GradScaler scaler;
    const std::string path = ::testing::TempDir() + "mixprec_errors_walk.pt";
    f(path, *model, opt, scaler);
  });
}
inline Action pickle_of(std::string pickle) {
  return thrown([pickle] {
    std::vector<char> bytes;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
      bytes.insert(bytes.end(), static_cast<const char*>(data),
                   static_cast<const char*>(data) + size);
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
    pickle_load(bytes);
  });
}

}  // namespace mixprec::errors_walk
