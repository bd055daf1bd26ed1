// The demo's training loop: the same loop for all three runs; the fp16 runs differ only in
// GradScalerOptions().enabled(), exactly as the seed's "enabled=False" example toggles it.
#include "trainer.h"

#include <mixprec/mixprec.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "model.h"

namespace mixprec_demo {
namespace {

using Clock = std::chrono::steady_clock;

// A progress line on stderr, shown only once a run has taken more than kQuietSeconds.
class Progress {
 public:
  Progress(std::string name, std::int64_t total) : name_(std::move(name)), total_(total) {}
  ~Progress() {
    if (shown_ && tty_) std::fprintf(stderr, "\n");
  }
  void update(std::int64_t step, double loss) {
    const double t = seconds();
    if (t < kQuietSeconds || (t - last_ < (tty_ ? 0.2 : 5.0) && step != total_)) return;
    last_ = t;
    shown_ = true;
    std::fprintf(stderr, "%s  %-18s step %5lld/%lld  loss %.3e  %5.1f s%s", tty_ ? "\r" : "",
                 name_.c_str(), static_cast<long long>(step), static_cast<long long>(total_), loss,
                 t, tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  static constexpr double kQuietSeconds = 2.0;
  std::string name_;
  std::int64_t total_;
  Clock::time_point start_ = Clock::now();
  double last_ = 0;
  bool shown_ = false;
  bool tty_ = isatty(fileno(stderr)) != 0;
};

}  // namespace

RunResult train(const Dataset& data, RunKind kind, const TrainConfig& config) {
  RunResult result;
  result.name = kind == RunKind::kFp32   ? "fp32"
                : kind == RunKind::kFp16 ? "fp16 no scaling"
                                         : "fp16 + GradScaler";
  result.key = kind == RunKind::kFp32 ? "fp32" : kind == RunKind::kFp16 ? "fp16" : "fp16_scaled";
  const bool fp16 = kind != RunKind::kFp32;
  const torch::Device device =
      config.cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const Precision precision = !fp16                ? Precision::kFp32
                              : config.native_fp16 ? Precision::kNative
                                                   : Precision::kFp16Emulated;
  result.flush_measured = precision == Precision::kFp16Emulated;

  torch::manual_seed(config.seed);  // the same initial weights in every run
  Mlp model(data.x.size(1), config.hidden, config.output_scale);
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(config.lr).eps(config.eps));
  mixprec::GradScaler scaler(mixprec::GradScalerOptions()
                                 .init_scale(config.init_scale)
                                 .growth_interval(config.growth_interval)
                                 .enabled(kind == RunKind::kFp16Scaled));
  const torch::Tensor x_all = data.x.to(device);
  const torch::Tensor y_all = data.y.to(device);
  const std::int64_t n = x_all.size(0);
  const std::int64_t batch = std::min(config.batch, n);
  // The same batch order in every run: its own generator, seeded like the weights.
  torch::manual_seed(config.seed + 1);
  torch::Tensor order = torch::randperm(n, torch::kLong);
  std::int64_t cursor = 0;

  Progress progress(result.name, config.steps);
  FlushCounter total;
  for (std::int64_t step = 1; step <= config.steps; ++step) {
    if (cursor + batch > n) {
      order = torch::randperm(n, torch::kLong);
      cursor = 0;
    }
    const torch::Tensor idx = order.slice(0, cursor, cursor + batch).to(device);
    cursor += batch;
    const torch::Tensor x = x_all.index_select(0, idx);
    const torch::Tensor y = y_all.index_select(0, idx);

    // Cosine decay to 0: the final weights are not the noise of a last large step.
    const double lr =
        0.5 * config.lr * (1.0 + std::cos(M_PI * double(step - 1) / double(config.steps)));
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    }
    FlushCounter counter;
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      // Real fp16 under autocast on the training device; emulated, the model rounds by itself.
      std::optional<mixprec::AutocastGuard> autocast;
      if (precision == Precision::kNative) autocast.emplace(device.type(), torch::kHalf);
      loss = torch::mse_loss(model->forward(x, precision, &counter), y);
    }
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    StepRecord rec;
    rec.step = step;
    rec.loss = loss.item<double>();
    rec.skipped = !scaler.last_step_applied(optimizer);
    scaler.update();
    rec.scale = scaler.get_scale();
    rec.flushed_share = counter.flushed_share();
    result.skipped_steps += rec.skipped ? 1 : 0;
    result.steps.push_back(rec);
    total.nonzero += counter.nonzero;
    total.flushed += counter.flushed;
    total.overflowed += counter.overflowed;
    progress.update(step, rec.loss);
  }

  torch::NoGradGuard no_grad;
  result.final_loss =
      torch::mse_loss(model->forward(x_all, Precision::kFp32, nullptr), y_all).item<double>();
  result.final_scale = scaler.get_scale();
  result.nonzero_grads = total.nonzero;
  result.flushed_grads = total.flushed;
  result.overflowed_grads = total.overflowed;
  result.seconds = progress.seconds();
  return result;
}

}  // namespace mixprec_demo
