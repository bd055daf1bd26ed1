// Dynamic loss scaling without LibTorch: a tiny linear model trained in plain C++ with
// mixprec::core::LossScaler. The gradients are "scaled" exactly as an fp16 backward would see
// them; one step injects an overflow to show the skip and the backoff.
//
// Exits 0 only when the fit converged (|w - 3| and |b + 1| below 1e-3) and exactly the injected
// step was skipped, with the scale halved there: scripts/main.sh and the test suite rely on it.
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
  // The loss's curvature is at most 2 (d^2L/db^2) and about 0.67 along w: a learning rate of 0.5
  // shrinks the error by about a third per applied step, so 30 steps converge to ~1e-5.
  const float lr = 0.5f;
  const int steps = 30;
  const int overflow_step = 7;

  mixprec::core::LossScalerOptions options;
  options.init_scale = 1024.0;
  options.policy.growth_interval = 5;  // grows often enough to be seen in 30 steps
  mixprec::core::LossScaler scaler(options);

  int skipped = 0;
  bool backed_off = false;
  for (int step = 1; step <= steps; ++step) {
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
    if (step == overflow_step) grads[0] = std::numeric_limits<float>::infinity();  // simulated

    const double scale_before = scaler.get_scale();
    const bool finite = scaler.unscale_({{grads.data(), 2}});
    if (finite) {
      w -= lr * grads[0];
      b -= lr * grads[1];
    } else {
      ++skipped;
    }
    scaler.update();
    if (step == overflow_step) backed_off = !finite && scaler.get_scale() == scale_before / 2;
    std::printf("step %2d  loss %.6e  %s  scale %g\n", step, loss, finite ? "applied" : "skipped",
                scaler.get_scale());
  }
  const bool converged = std::abs(w - 3.0f) < 1e-3f && std::abs(b + 1.0f) < 1e-3f;
  std::printf("w = %.4f, b = %.4f (target 3, -1): %s; %d step skipped (the injected one: %s)\n", w,
              b, converged ? "converged" : "NOT converged", skipped,
              backed_off ? "skipped, scale halved" : "NOT handled");
  return converged && skipped == 1 && backed_off ? 0 : 1;
}
