// The demo's text outputs: the comparison tables on stdout, the per-step log (log.csv), the
// machine-readable summary (summary.csv) that tests read and the FP8 scales (fp8_scales.csv).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "run_result.h"

namespace mixprec_demo {

/// The table: per run its final loss (and its ratio to the first run's, the fp32 reference),
/// skipped steps, final scale and the share of gradient elements that fp16 (fp8) flushed to zero.
void print_table(std::ostream& out, const std::vector<RunResult>& runs);

/// The FP8 runs' table: each final loss against the bf16 run's, and the scale linear0's
/// grad_output was cast with at the last step.
void print_fp8_table(std::ostream& out, const std::vector<RunResult>& runs);

/// log.csv: `step,run,loss,scale,skipped,flushed_share`, one row per step and run.
/// Throws std::runtime_error when the file cannot be written.
void write_log_csv(const std::string& path, const std::vector<RunResult>& runs);

/// summary.csv: `run,final_loss,skipped_steps,final_scale,flushed_share,flushed,nonzero,
/// overflowed`, one row per run; flushed_share is `nan` where nothing was measured.
/// Throws std::runtime_error when the file cannot be written.
void write_summary_csv(const std::string& path, const std::vector<RunResult>& runs);

/// fp8_scales.csv: `step,run,grad_scale_min,grad_scale_max`, one row per step of each FP8 run:
/// the scale(s) linear0's grad_output was multiplied by before its FP8 cast (StepRecord).
/// Throws std::runtime_error when the file cannot be written.
void write_fp8_scales_csv(const std::string& path, const std::vector<RunResult>& runs);

}  // namespace mixprec_demo
