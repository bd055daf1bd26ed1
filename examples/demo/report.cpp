// The table on stdout and the two CSV files of the demo.
#include "report.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace mixprec_demo {
namespace {

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::ofstream open_for_writing(const std::string& path) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
  f << std::setprecision(std::numeric_limits<double>::max_digits10);  // exact round trip
  return f;
}

}  // namespace

void print_table(std::ostream& out, const std::vector<RunResult>& runs) {
  const double reference = runs.empty() ? 0.0 : runs.front().final_loss;
  bool any_fp8 = false;
  for (const RunResult& r : runs) any_fp8 = any_fp8 || r.fp8;
  out << std::left << std::setw(19) << "run" << std::right << std::setw(12) << "final loss"
      << std::setw(10) << "vs fp32" << std::setw(9) << "skipped" << std::setw(13) << "final scale"
      << std::setw(11) << "grad norm" << std::setw(9) << "clipped"
      << "   grad elements flushed to 0 by fp16" << (any_fp8 ? " / fp8" : "") << "\n";
  for (const RunResult& r : runs) {
    // An FP8 run has no GradScaler: its scales are per tensor (per block), in the second table.
    const std::string scale = !r.fp8                     ? format("%g", r.final_scale)
                              : r.key == "fp8_mxfp8"     ? "per block"
                              : r.key == "fp8_rowwise"   ? "per row"
                              : r.key == "fp8_blockwise" ? "per tile"
                              : r.key == "fp4_nvfp4"     ? "per block"
                              : r.key == "fp4_mxfp4"     ? "per block"
                              : r.key == "fp8_none"      ? "none"
                                                         : "per tensor";
    out << std::left << std::setw(19) << r.name << std::right << std::setw(12)
        << format("%.3e", r.final_loss) << std::setw(10)
        << (reference > 0 ? format("%.2fx", r.final_loss / reference) : "-") << std::setw(9)
        << r.skipped_steps << std::setw(13) << scale << std::setw(11)
        << (std::isnan(r.median_grad_norm) ? std::string("-") : format("%.3g", r.median_grad_norm))
        << std::setw(9) << r.clipped_steps << "   ";
    if (r.flush_measured) {
      out << format("%5.2f%%", 100.0 * r.flushed_share()) << " (" << r.flushed_grads << " of "
          << r.nonzero_grads << " non-zero)";
    } else {
      out << (r.key == "fp32"   ? "    - (nothing rounded)"
              : r.key == "bf16" ? "    - (bf16 has fp32's exponent range)"
                                : "    - (real fp16: not measurable)");
    }
    out << "\n";
  }
}

void print_fp8_table(std::ostream& out, const std::vector<RunResult>& runs) {
  const RunResult* bf16 = nullptr;
  for (const RunResult& r : runs) {
    if (r.key == "bf16") bf16 = &r;
  }
  out << std::left << std::setw(19) << "fp8 run" << std::right << std::setw(10) << "vs bf16"
      << "   scale of linear0's grad_output before its fp8 cast, last step\n";
  for (const RunResult& r : runs) {
    if (!r.fp8) continue;
    const double ratio =
        bf16 != nullptr && bf16->final_loss > 0 ? r.final_loss / bf16->final_loss : std::nan("");
    out << std::left << std::setw(19) << r.name << std::right << std::setw(10)
        << (std::isnan(ratio) ? std::string("-") : format("%.2fx", ratio)) << "   ";
    const StepRecord* last = r.steps.empty() ? nullptr : &r.steps.back();
    if (r.key == "fp4_nvfp4" || r.key == "fp4_mxfp4") {
      out << "- (linear0 is fp32 in the 4-bit runs)";
    } else if (last == nullptr || last->fp8_grad_scale_max <= 0) {
      out << "-";
    } else if (r.key == "fp8_mxfp8" || r.key == "fp8_rowwise" || r.key == "fp8_blockwise") {
      out << format("2^%.0f", std::log2(last->fp8_grad_scale_min))
          << format(" .. 2^%.0f", std::log2(last->fp8_grad_scale_max))
          << (r.key == "fp8_mxfp8"     ? " (E8M0, one per block of 32)"
              : r.key == "fp8_rowwise" ? " (powers of two, one per row of its transpose)"
                                       : " (powers of two, one per tile of 1 x 128)");
    } else {
      out << format("2^%.2f", std::log2(last->fp8_grad_scale_max))
          << (r.key == "fp8_none"      ? " (scale 1: E5M2 flushes gradients below 2^-17)"
              : r.key == "fp8_delayed" ? " (fp8_max / the amax history's max)"
                                       : " (fp8_max / this gradient's amax)");
    }
    out << "\n";
  }
}

void write_log_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f = open_for_writing(path);
  f << "step,run,loss,scale,skipped,flushed_share,grad_norm\n";
  for (const RunResult& r : runs) {
    for (const StepRecord& s : r.steps) {
      f << s.step << ',' << r.key << ',' << s.loss << ',' << s.scale << ',' << (s.skipped ? 1 : 0)
        << ',';
      if (r.flush_measured) {
        f << s.flushed_share;
      } else {
        f << "nan";
      }
      f << ',' << s.grad_norm << '\n';
    }
  }
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

void write_summary_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f = open_for_writing(path);
  f << "run,final_loss,skipped_steps,final_scale,flushed_share,flushed,nonzero,overflowed,"
       "median_grad_norm,clipped_steps\n";
  for (const RunResult& r : runs) {
    f << r.key << ',' << r.final_loss << ',' << r.skipped_steps << ',' << r.final_scale << ',';
    if (r.flush_measured) {
      f << r.flushed_share();
    } else {
      f << "nan";
    }
    f << ',' << r.flushed_grads << ',' << r.nonzero_grads << ',' << r.overflowed_grads << ','
      << r.median_grad_norm << ',' << r.clipped_steps << '\n';
  }
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

void write_fp8_scales_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f = open_for_writing(path);
  f << "step,run,grad_scale_min,grad_scale_max\n";
  for (const RunResult& r : runs) {
    if (!r.fp8) continue;
    for (const StepRecord& s : r.steps) {
      f << s.step << ',' << r.key << ',' << s.fp8_grad_scale_min << ',' << s.fp8_grad_scale_max
        << '\n';
    }
  }
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

}  // namespace mixprec_demo
