// The demo's command line: flags, their defaults and --help.
#pragma once

#include <cstdint>
#include <string>

namespace mixprec_demo {

/// Parsed command line.
struct Options {
  std::int64_t steps = 1000;
  std::int64_t hidden = 32;
  std::int64_t batch = 256;
  double lr = 0.01;
  std::uint64_t seed = 0;
  double target_rms = 0;  ///< 0: the embedded task's default (kDefaultTargetRms)
  double init_scale = 65536;          ///< the scaled run's GradScaler init_scale
  std::int64_t growth_interval = 40;  ///< the scaled run's GradScaler growth_interval
  double max_norm = 1.0;  ///< every run's gradient clipping (0: none)
  std::string fp16 = "auto";  ///< "auto", "native" or "emulated"
  std::string out = "demo_out";
  std::string csv;  ///< empty: the embedded task
  bool help = false;
};

/// The --help text.
std::string usage();

/// Parses argv; throws std::invalid_argument naming the flag and the value for anything wrong.
Options parse_options(int argc, char** argv);

}  // namespace mixprec_demo
