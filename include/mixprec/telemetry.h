// What GradScaler reports beyond PyTorch: telemetry counters, scale history, update events and
// overflow diagnostics (docs/options.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixprec {

/// Counters kept on the scale's device by every update(); reading them is a device sync on CUDA.
struct ScalerTelemetry {
  std::int64_t iterations = 0;               ///< update() calls that applied the rule
  std::int64_t skipped_steps = 0;            ///< of those, iterations that overflowed
  std::int64_t growths = 0;                  ///< times the scale grew
  std::int64_t backoffs = 0;                 ///< times the scale backed off
  std::int64_t consecutive_overflows = 0;    ///< overflows since the last clean iteration
  std::int64_t last_overflow_iteration = -1;  ///< 0-based iteration of the last overflow, or -1
  std::int64_t hysteresis_tracker = 1;       ///< overflows still tolerated before a backoff
};

/// One row of the scale history: the scale after the update of `iteration`.
struct ScaleHistoryEntry {
  std::int64_t iteration = 0;
  double scale = 0.0;
  bool overflow = false;
};

/// What one update() did, handed to GradScaler::on_event callbacks.
struct ScaleEventInfo {
  std::uint32_t events = 0;  ///< core::ScaleEvent bits (kEventOverflow, kEventBackoff, ...)
  std::int64_t iteration = 0;
  double scale = 0.0;        ///< the scale after the update
};

/// Inf/NaN found in one parameter's gradient.
struct ParameterOverflow {
  std::string name;            ///< from set_parameter_names(), else "group<g>.param<i>"
  std::int64_t index = 0;      ///< position over all param groups, in order
  std::int64_t inf_count = 0;
  std::int64_t nan_count = 0;
  std::int64_t first_index = -1;  ///< flat index of the first offending element
  double first_value = 0.0;       ///< its value (inf, -inf or NaN)
};

/// Which parameters overflowed in one unscale_ (GradScalerOptions::diagnose_overflow).
struct OverflowReport {
  std::int64_t iteration = 0;  ///< the telemetry iteration the overflow belongs to
  std::vector<ParameterOverflow> parameters;
};

}  // namespace mixprec
