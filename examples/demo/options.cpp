// Command-line parsing of the demo: --flag value or --flag=value, checked ranges, --help.
#include "options.h"

#include <cmath>
#include <stdexcept>

namespace mixprec_demo {

std::string usage() {
  return R"(mixprec_demo: what loss scaling buys. Trains the same small MLP in fp32, fp16
without loss scaling, fp16 with mixprec::GradScaler and bf16, and with LibTorch >= 2.1
in FP8 (mixprec::fp8::Linear) without scaling and with the delayed, current and MXFP8
recipes, and compares them.

Usage: mixprec_demo [flags]
  --steps N       optimizer steps per run (default 1000)
  --hidden N      width of the MLP's 3 hidden layers (default 32)
  --batch N       minibatch size (default 256)
  --lr X          Adam's peak learning rate, cosine decay to 0 (default 0.01)
  --seed N        seed of the embedded data, initial weights and batch order (default 0)
  --target-rms X  RMS of the embedded task's targets (default 0.003): the smaller, the
                  smaller the gradients; 1 makes fp16 harmless even without scaling
  --init-scale X  the scaled run's GradScaler init_scale (default 65536, PyTorch's)
  --growth-interval N
                  the scaled run's GradScaler growth_interval (default 40; PyTorch's 2000
                  is too long for a demo of 1000 steps to show growth and backoff)
  --max-norm X    clip every run's gradients to this total norm, as PyTorch's AMP
                  recipe does (unscale_, clip_grad_norm_, step); 0: no clipping
                  (default 1)
  --fp16 MODE     how the fp16 runs get fp16: native (real fp16 under autocast: on CUDA, or
                  on the CPU with LibTorch >= 2.2), emulated (fp32 compute, values and
                  gradients rounded through fp16 at every layer boundary), or auto (default:
                  native where LibTorch can, emulated otherwise)
  --csv PATH      train on a CSV file instead: numeric columns, the last one the target
  --out DIR       folder for log.csv, summary.csv, fp8_scales.csv and plot.png
                  (default demo_out)
  --help          this text

On a CPU with LibTorch 1.13 (no fp16 autocast there), fp16 is emulated: activations and
gradients are rounded through fp16 at every layer boundary (see docs/demo.md). FP8 on a
CPU is an emulation too: the FP8 rounding is real, the GEMMs run in fp32.
)";
}

namespace {

std::int64_t parse_int(const std::string& flag, const std::string& v, std::int64_t min) {
  std::size_t used = 0;
  long long r = 0;
  try {
    r = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || r < min) {
    throw std::invalid_argument(flag + " takes an integer >= " + std::to_string(min) + ", got '" +
                                v + "'");
  }
  return r;
}

double parse_positive(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  double r = 0;
  try {
    r = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || !std::isfinite(r) || r <= 0) {
    throw std::invalid_argument(flag + " takes a number > 0, got '" + v + "'");
  }
  return r;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    bool has_value = false;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      continue;
    }
    const bool known = flag == "--steps" || flag == "--hidden" || flag == "--batch" ||
                       flag == "--lr" || flag == "--seed" || flag == "--out" || flag == "--csv" ||
                       flag == "--target-rms" || flag == "--init-scale" ||
                       flag == "--growth-interval" || flag == "--fp16" || flag == "--max-norm";
    if (!known) throw std::invalid_argument("unknown flag '" + flag + "' (see --help)");
    if (!has_value) {
      if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value (see --help)");
      value = argv[++i];
    }
    if (flag == "--steps") o.steps = parse_int(flag, value, 1);
    if (flag == "--hidden") o.hidden = parse_int(flag, value, 1);
    if (flag == "--batch") o.batch = parse_int(flag, value, 1);
    if (flag == "--lr") o.lr = parse_positive(flag, value);
    if (flag == "--seed") o.seed = static_cast<std::uint64_t>(parse_int(flag, value, 0));
    if (flag == "--target-rms") o.target_rms = parse_positive(flag, value);
    if (flag == "--init-scale") o.init_scale = parse_positive(flag, value);
    if (flag == "--growth-interval") o.growth_interval = parse_int(flag, value, 1);
    if (flag == "--max-norm") {
      o.max_norm = value == "0" ? 0.0 : parse_positive(flag, value);
    }
    if (flag == "--fp16") {
      if (value != "auto" && value != "native" && value != "emulated") {
        throw std::invalid_argument("--fp16 takes auto, native or emulated, got '" + value + "'");
      }
      o.fp16 = value;
    }
    if (flag == "--out") o.out = value;
    if (flag == "--csv") o.csv = value;
    if ((flag == "--out" || flag == "--csv") && value.empty()) {
      throw std::invalid_argument(flag + " needs a non-empty path");
    }
  }
  return o;
}

}  // namespace mixprec_demo
