// mixprec's side of python.messages (messages.py): triggers each misuse that PyTorch's own
// torch.amp.GradScaler / torch.autocast also reports on the CPU, and prints what mixprec threw or
// warned, one "<key>\t<message>" line each (newlines in a message as \n). messages.py triggers
// the same misuses in Python and requires Python's text inside each of these.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <functional>
#include <iostream>
#include <string>

#include "message_of.h"
#include "mixprec/mixprec.h"
#include "torch/warning_capture.h"
#include "torch/without_backtrace.h"

namespace {

using mixprec::GradScaler;

// One parameter with a grad (fp32, or `dtype`), its SGD, and a scaler (scale() called when
// `scaled`).
struct Model {
  torch::Tensor w;
  torch::optim::SGD opt;
  GradScaler scaler;
  explicit Model(bool scaled = true, torch::Dtype dtype = torch::kFloat, bool grad = true)
      : w(torch::zeros({3}, torch::TensorOptions().dtype(dtype).requires_grad(true))),
        opt(std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(1)) {
    if (grad) w.mutable_grad() = torch::ones({3}, dtype);
    if (scaled) scaler.scale(torch::ones({1}));
  }
};

std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

void report(const char* key, const std::function<void()>& misuse) {
  const std::string message =
      mixprec::test::message_of(misuse, WithoutBacktrace{}).value_or("<nothing was thrown>");
  std::cout << key << "\t" << escaped(message) << "\n";
}

}  // namespace

int main() {
  report("unscale_before_scale", [] {
    Model m(/*scaled=*/false);
    m.scaler.unscale_(m.opt);
  });
  report("unscale_twice", [] {
    Model m;
    m.scaler.unscale_(m.opt);
    m.scaler.unscale_(m.opt);
  });
  report("unscale_after_step", [] {
    Model m;
    m.scaler.step(m.opt);
    m.scaler.unscale_(m.opt);
  });
  report("step_twice", [] {
    Model m;
    m.scaler.step(m.opt);
    m.scaler.step(m.opt);
  });
  report("step_with_closure", [] {
    Model m;
    m.scaler.step(m.opt, [] { return torch::zeros({}); });
  });
  report("step_without_grads", [] {
    Model m(/*scaled=*/true, torch::kFloat, /*grad=*/false);
    m.scaler.step(m.opt);
  });
  report("update_without_step", [] {
    Model m;
    m.scaler.update();
  });
  report("fp16_grads", [] {
    Model m(/*scaled=*/true, torch::kHalf);
    m.scaler.step(m.opt);
  });
  report("update_new_scale_two_elements", [] {
    Model m;
    m.scaler.step(m.opt);
    m.scaler.update(torch::ones({2}));
  });
  report("load_empty_state_dict", [] {
    GradScaler().load_state_dict(
        c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  });
  // The warning of a CUDA autocast region where CUDA is not available.
  if (torch::cuda::is_available()) {
    std::cout << "autocast_cuda_without_cuda\t<a CUDA device is present>\n";
  } else {
    mixprec::test::WarningCapture capture;
    const mixprec::test::warning_utils::WarningHandlerGuard handler(&capture);
    const mixprec::test::warning_utils::WarnAlways every_time;
    mixprec::AutocastGuard guard(torch::kCUDA);
    std::cout << "autocast_cuda_without_cuda\t" << escaped(capture.text) << "\n";
  }
  return 0;
}
