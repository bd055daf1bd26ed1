// Dynamic loss scaling without LibTorch: a tiny linear model trained in plain C++ with
// mixprec::core::LossScaler. The gradients are "scaled" exactly as an fp16 backward would see
// them; one step injects an overflow to show the skip and the backoff.
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "mixprec/core/loss_scaler.h"

int main() {
  // y = 3x - 1, fitted by w*x + b with the mean squared error.
  std::vector<float> xs, ys;
  for (int i = 0; i < 16; ++i) {
    xs.push_back(static_cast<float>(i) / 8.0f - 1.0f);
    ys.push_back(3.0f * xs.back() - 1.0f);
  }
  float w = 0.0f, b = 0.0f;
  const float lr = 0.1f;

  mixprec::core::LossScalerOptions options;
  options.init_scale = 1024.0;
  options.policy.growth_interval = 5;
  mixprec::core::LossScaler scaler(options);

  for (int step = 1; step <= 20; ++step) {
    // Forward and backward of the *scaled* loss: gradients come out multiplied by the scale.
    float loss = 0.0f;
    std::vector<float> grads(2, 0.0f);  // dL/dw, dL/db
    const auto n = static_cast<float>(xs.size());
    const auto s = static_cast<float>(scaler.scale(1.0));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float err = w * xs[i] + b - ys[i];
      loss += err * err / n;
      grads[0] += s * 2.0f * err * xs[i] / n;
      grads[1] += s * 2.0f * err / n;
    }
    if (step == 7) grads[0] = std::numeric_limits<float>::infinity();  // a simulated overflow

    const bool finite = scaler.unscale_({{grads.data(), 2}});
    if (finite) {
      w -= lr * grads[0];
      b -= lr * grads[1];
    }
    scaler.update();
    std::printf("step %2d  loss %.6f  %s  scale %g\n", step, loss, finite ? "applied" : "skipped",
                scaler.get_scale());
  }
  std::printf("w = %.4f, b = %.4f (target 3, -1)\n", w, b);
  return std::abs(w - 3.0f) < 0.5f && std::abs(b + 1.0f) < 0.5f ? 0 : 1;
}
