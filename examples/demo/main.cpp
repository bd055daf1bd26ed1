// mixprec_demo: shows why a GradScaler exists, and why FP8 needs a scale per tensor. Trains one
// small MLP in fp32, fp16 without loss scaling, fp16 with mixprec::GradScaler, bf16 and (LibTorch
// >= 2.1) FP8 with each of mixprec::fp8's recipes and without scaling, and prints, logs and plots
// what low precision costs without scaling: gradient elements flushed to zero and a worse final
// loss. See docs/demo.md.
#include <mixprec/mixprec.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <exception>
#include <filesystem>
#include <iostream>
#include <vector>

#include "model.h"
#include "options.h"
#include "plot.h"
#include "report.h"
#include "task.h"
#include "trainer.h"

namespace {

int run(const mixprec_demo::Options& o) {
  using namespace mixprec_demo;
  // One thread: the numbers of the table do not depend on the machine's core count.
  torch::set_num_threads(1);
  const Dataset data =
      o.csv.empty() ? make_default_task(o.seed, o.target_rms > 0 ? o.target_rms : kDefaultTargetRms)
                    : load_csv(o.csv);

  TrainConfig config;
  config.steps = o.steps;
  config.hidden = o.hidden;
  config.batch = o.batch;
  config.lr = o.lr;
  config.seed = o.seed;
  config.output_scale = data.target_rms;
  config.cuda = torch::cuda::is_available();
  config.init_scale = o.init_scale;
  config.growth_interval = o.growth_interval;
  config.max_norm = o.max_norm;

  std::cout << "data: " << data.description << "\n";
  std::cout << "model: MLP " << data.x.size(1) << " -> " << MlpImpl::kHiddenLayers << " x "
            << o.hidden << " (tanh) -> 1, output x " << config.output_scale << "; Adam lr " << o.lr
            << " (cosine decay), batch " << std::min<std::int64_t>(o.batch, data.x.size(0)) << ", "
            << o.steps << " steps per run\n";
  const torch::DeviceType device = config.cuda ? torch::kCUDA : torch::kCPU;
  const bool native_possible = mixprec::AutocastGuard::is_supported(device, torch::kHalf);
  if (o.fp16 == "native" && !native_possible) {
    throw std::invalid_argument("--fp16 native: this LibTorch (" TORCH_VERSION
                                ") has no fp16 autocast on the CPU (LibTorch >= 2.2 has)");
  }
  config.native_fp16 = o.fp16 == "native" || (o.fp16 == "auto" && native_possible);
  if (config.native_fp16) {
    std::cout << "fp16: real, under mixprec::AutocastGuard(" << (config.cuda ? "CUDA" : "CPU")
              << ", float16); the flushed share cannot be measured there (no fp32 copy of the "
                 "gradients exists)\n";
  } else {
    std::cout << "fp16: EMULATED on the " << (config.cuda ? "GPU" : "CPU")
              << ": activations, weights and their gradients are rounded through fp16 at every "
                 "layer boundary, so gradients below 2^-25 flush to zero and above 65504 overflow "
                 "to inf, as in real fp16; the arithmetic itself stays fp32"
              << (native_possible ? "" : " (this LibTorch has no fp16 autocast on the CPU)")
              << "\n";
  }
  std::cout << "GradScaler: init_scale " << config.init_scale
            << ", growth_factor 2, backoff_factor 0.5, growth_interval " << config.growth_interval
            << " (PyTorch's default 2000 is too long for a short demo)\n";
  if (config.max_norm > 0) {
    std::cout << "clipping: every run, to total norm " << config.max_norm
              << " (scaler.clip_grad_norm_: Python's unscale_ + clip_grad_norm_)\n";
  }
  std::cout << "bf16: real, under mixprec::AutocastGuard(" << (config.cuda ? "CUDA" : "CPU")
            << ", bfloat16): fp32's exponent range, 8 significant bits; the reference of the fp8 "
               "runs\n";
  std::vector<RunKind> kinds = {RunKind::kFp32, RunKind::kFp16, RunKind::kFp16Scaled,
                                RunKind::kBf16};
  if (fp8_run_supported()) {
    std::cout << "fp8: mixprec::fp8::Linear layers (the same initial weights) under "
                 "mixprec::fp8::Autocast(recipe), E4M3 forward, E5M2 gradients (MXFP8, rowwise, "
                 "blockwise: E4M3, a scale per block of 32, row, tile); recipes at their "
                 "defaults; "
              << (config.cuda ? "on CUDA"
                  : MIXPREC_TORCH_AT_LEAST(2, 14)
                      ? "on the CPU: the per-tensor recipes' GEMMs are at::_scaled_mm's (its "
                        "fp32 path where oneDNN's would be a reference kernel, docs/fp8.md), the "
                        "block recipes' fp32 on dequantized values (an emulation)"
                      : "on the CPU an EMULATION: the FP8 rounding is real, the GEMMs are fp32 "
                        "on dequantized values")
              << "\n";
    kinds.insert(kinds.end(), {RunKind::kFp8None, RunKind::kFp8Delayed, RunKind::kFp8Current,
                               RunKind::kFp8Mxfp8, RunKind::kFp8Rowwise, RunKind::kFp8Blockwise,
                               RunKind::kFp4Nvfp4, RunKind::kFp4Mxfp4});
    std::cout << "fp4: the same, with E2M1 elements (NVFP4: TE's recipe, E4M3 scales per 16, "
                 "16x16 weight tiles, the RHT and stochastic rounding on the gradients; MXFP4: "
                 "E8M0 scales per 32, FLOOR) on the hidden layers; the first and last layers, "
                 "whose 8 inputs and 1 output are no whole 4-bit block, stay fp32 (docs/fp4.md)\n";
  } else {
    std::cout << "fp8 runs: left out: this LibTorch (" TORCH_VERSION
                 ") has no float8 dtypes (LibTorch >= 2.1 has)\n";
  }
  std::cout << std::endl;

  std::vector<RunResult> runs;
  for (RunKind kind : kinds) {
    std::cout.flush();  // keep stdout in order with the progress lines on stderr
    runs.push_back(train(data, kind, config));
  }
  print_table(std::cout, runs);
  std::cout << "(final loss: MSE of the final weights over all samples, computed in fp32; "
               "flushed: gradient elements non-zero in fp32 that became 0 when stored in fp16"
            << (fp8_run_supported() ? ", or when cast to fp8 (fp4) at a layer's grad_output" : "")
            << ", over all steps)\n\n";
  if (fp8_run_supported()) {
    print_fp8_table(std::cout, runs);
    std::cout << "(vs bf16: final loss over the bf16 run's; delayed and current have one scale "
                 "per tensor, MXFP8 one per block of 32 elements, rowwise one per row, blockwise "
                 "one per tile)\n\n";
  }

  std::filesystem::create_directories(o.out);
  const std::filesystem::path out(o.out);
  write_log_csv((out / "log.csv").string(), runs);
  write_summary_csv((out / "summary.csv").string(), runs);
  std::cout << "wrote " << (out / "log.csv").string() << " (per step) and "
            << (out / "summary.csv").string() << " (the table)\n";
  if (fp8_run_supported()) {
    write_fp8_scales_csv((out / "fp8_scales.csv").string(), runs);
    std::cout << "wrote " << (out / "fp8_scales.csv").string() << " (fp8 scales per step)\n";
  }
  std::string message;
  if (write_plot(o.out, runs, &message)) {
    std::cout << "wrote " << message << " (loss and scales per step)\n";
  } else {
    std::cout << "no plot: " << message << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const mixprec_demo::Options options = mixprec_demo::parse_options(argc, argv);
    if (options.help) {
      std::cout << mixprec_demo::usage();
      return 0;
    }
    return run(options);
  } catch (const std::invalid_argument& e) {
    std::cerr << "mixprec_demo: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mixprec_demo: " << e.what() << "\n";
    return 1;
  }
}
