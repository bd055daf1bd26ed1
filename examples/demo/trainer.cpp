// The demo's training loop: the same loop for all runs; the fp16 runs differ only in
// GradScalerOptions().enabled(), exactly as the seed's "enabled=False" example toggles it, and the
// FP8 runs only in the fp8::Recipe their fp8::Linear layers run under.
#include "trainer.h"

#include <mixprec/mixprec.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fp8_model.h"
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

struct RunNames {
  const char* name;
  const char* key;
};

RunNames names(RunKind kind) {
  switch (kind) {
    case RunKind::kFp32:
      return {"fp32", "fp32"};
    case RunKind::kFp16:
      return {"fp16 no scaling", "fp16"};
    case RunKind::kFp16Scaled:
      return {"fp16 + GradScaler", "fp16_scaled"};
    case RunKind::kBf16:
      return {"bf16", "bf16"};
    case RunKind::kFp8None:
      return {"fp8 no scaling", "fp8_none"};
    case RunKind::kFp8Delayed:
      return {"fp8 delayed", "fp8_delayed"};
    case RunKind::kFp8Current:
      return {"fp8 current", "fp8_current"};
    case RunKind::kFp8Mxfp8:
      return {"fp8 MXFP8", "fp8_mxfp8"};
    case RunKind::kFp8Rowwise:
      return {"fp8 rowwise", "fp8_rowwise"};
    case RunKind::kFp8Blockwise:
      return {"fp8 blockwise", "fp8_blockwise"};
    case RunKind::kFp4Nvfp4:
      return {"fp4 NVFP4", "fp4_nvfp4"};
    case RunKind::kFp4Mxfp4:
      return {"fp4 MXFP4", "fp4_mxfp4"};
  }
  return {"?", "?"};
}

bool is_fp4(RunKind kind) { return kind == RunKind::kFp4Nvfp4 || kind == RunKind::kFp4Mxfp4; }

bool is_fp8(RunKind kind) {
  return kind == RunKind::kFp8None || kind == RunKind::kFp8Delayed ||
         kind == RunKind::kFp8Current || kind == RunKind::kFp8Mxfp8 ||
         kind == RunKind::kFp8Rowwise || kind == RunKind::kFp8Blockwise || is_fp4(kind);
}

#if MIXPREC_TORCH_FP8
// Each recipe with its defaults (TE's, torchao's): the demo shows them as a user gets them.
mixprec::fp8::RecipeOptions recipe_options(RunKind kind) {
  using mixprec::fp8::Scaling;
  const Scaling scaling = kind == RunKind::kFp8None        ? Scaling::kNone
                          : kind == RunKind::kFp8Delayed   ? Scaling::kDelayed
                          : kind == RunKind::kFp8Current   ? Scaling::kCurrent
                          : kind == RunKind::kFp8Rowwise   ? Scaling::kRowwise
                          : kind == RunKind::kFp8Blockwise ? Scaling::kBlockwise
                          : kind == RunKind::kFp4Nvfp4     ? Scaling::kNvfp4
                          : kind == RunKind::kFp4Mxfp4     ? Scaling::kMxfp4
                                                           : Scaling::kMxfp8;
  return mixprec::fp8::RecipeOptions().scaling(scaling);
}
#endif

}  // namespace

bool fp8_run_supported() { return MIXPREC_TORCH_FP8 != 0; }

RunResult train(const Dataset& data, RunKind kind, const TrainConfig& config) {
  RunResult result;
  result.name = names(kind).name;
  result.key = names(kind).key;
  result.fp8 = is_fp8(kind);
  if (result.fp8 && !fp8_run_supported()) {
    throw std::invalid_argument("the " + result.name + " run needs LibTorch >= 2.1 (float8)");
  }
  const bool fp16 = kind == RunKind::kFp16 || kind == RunKind::kFp16Scaled;
  const torch::Device device =
      config.cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  // bf16 is always real (CPU bf16 autocast exists from LibTorch 1.10); FP8 runs in fp32 outside
  // the layers' own casts, and counts those casts' flushes itself (Fp8Mlp::count_flushed).
  const Precision precision = kind == RunKind::kBf16 ? Precision::kNative
                              : !fp16                ? Precision::kFp32
                              : config.native_fp16   ? Precision::kNative
                                                     : Precision::kFp16Emulated;
  const torch::ScalarType autocast_dtype = kind == RunKind::kBf16 ? torch::kBFloat16 : torch::kHalf;
  result.flush_measured = precision == Precision::kFp16Emulated || result.fp8;

  torch::manual_seed(config.seed);  // the same initial weights in every run
  Mlp model(data.x.size(1), config.hidden, config.output_scale);
  model->to(device);
  std::vector<torch::Tensor> parameters = model->parameters();
#if MIXPREC_TORCH_FP8
  // The FP8 model starts from the very same weights (copied), and keeps one recipe for the run.
  const mixprec::fp8::RecipeOptions fp8_options = recipe_options(kind);
  mixprec::fp8::Recipe recipe(fp8_options);
  Fp8Mlp fp8_model{nullptr};
  if (result.fp8) {
    fp8_model = Fp8Mlp(*model, config.output_scale, fp8_options.amax_history_len(), is_fp4(kind));
    parameters = fp8_model->parameters();
  }
#endif
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(config.lr).eps(config.eps));
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
    StepRecord rec;
#if MIXPREC_TORCH_FP8
    if (result.fp8) {
      {
        mixprec::fp8::Autocast fp8(recipe);  // also the delayed recipe's once-per-step update
        loss = torch::mse_loss(fp8_model->forward(x), y);
      }
      scaler.scale(loss).backward();  // the scaler is disabled here: FP8 scales per tensor
      fp8_model->count_flushed(recipe, &counter, &rec.fp8_grad_scale_min, &rec.fp8_grad_scale_max);
    }
#endif
    if (!result.fp8) {
      // Real fp16 or bf16 under autocast on the training device; emulated fp16, the model rounds
      // by itself.
      {
        std::optional<mixprec::AutocastGuard> autocast;
        if (precision == Precision::kNative) autocast.emplace(device.type(), autocast_dtype);
        loss = torch::mse_loss(model->forward(x, precision, &counter), y);
      }
      scaler.scale(loss).backward();
    }
    // PyTorch's recipe: unscale_ + clip_grad_norm_, here in one read of the grads (a disabled
    // scaler clips plainly).
    rec.grad_norm = config.max_norm > 0
                        ? scaler.clip_grad_norm_(optimizer, config.max_norm).item<double>()
                        : std::nan("");
    scaler.step(optimizer);
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
  // Outside every autocast scope, so in fp32 for all runs (fp8::Linear is then nn::Linear).
  torch::Tensor prediction;
#if MIXPREC_TORCH_FP8
  if (result.fp8) prediction = fp8_model->forward(x_all);
#endif
  if (!result.fp8) prediction = model->forward(x_all, Precision::kFp32, nullptr);
  result.final_loss = torch::mse_loss(prediction, y_all).item<double>();
  result.final_scale = scaler.get_scale();
  result.nonzero_grads = total.nonzero;
  result.flushed_grads = total.flushed;
  result.overflowed_grads = total.overflowed;
  result.seconds = progress.seconds();
  std::vector<double> norms;
  for (const StepRecord& s : result.steps) {
    if (!s.skipped && std::isfinite(s.grad_norm)) norms.push_back(s.grad_norm);
    if (s.grad_norm > config.max_norm && config.max_norm > 0) ++result.clipped_steps;
  }
  std::sort(norms.begin(), norms.end());
  result.median_grad_norm = norms.empty() ? std::nan("") : norms[norms.size() / 2];
  return result;
}

}  // namespace mixprec_demo
