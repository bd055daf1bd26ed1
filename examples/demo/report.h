// The demo's text outputs: the comparison table on stdout, the per-step log (log.csv) and the
// machine-readable summary (summary.csv) that tests read.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "run_result.h"

namespace mixprec_demo {

/// The table: per run its final loss (and its ratio to the first run's, the fp32 reference),
/// skipped steps, final scale and the share of gradient elements that fp16 flushed to zero.
void print_table(std::ostream& out, const std::vector<RunResult>& runs);

/// log.csv: `step,run,loss,scale,skipped,flushed_share`, one row per step and run.
/// Throws std::runtime_error when the file cannot be written.
void write_log_csv(const std::string& path, const std::vector<RunResult>& runs);

/// summary.csv: `run,final_loss,skipped_steps,final_scale,flushed_share,flushed,nonzero,
/// overflowed`, one row per run; flushed_share is `nan` where nothing was measured.
/// Throws std::runtime_error when the file cannot be written.
void write_summary_csv(const std::string& path, const std::vector<RunResult>& runs);

}  // namespace mixprec_demo
