// The table on stdout and the two CSV files of the demo.
#include "report.h"

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
  out << std::left << std::setw(19) << "run" << std::right << std::setw(12) << "final loss"
      << std::setw(10) << "vs fp32" << std::setw(9) << "skipped" << std::setw(13) << "final scale"
      << "   grad elements flushed to 0 by fp16\n";
  for (const RunResult& r : runs) {
    out << std::left << std::setw(19) << r.name << std::right << std::setw(12)
        << format("%.3e", r.final_loss) << std::setw(10)
        << (reference > 0 ? format("%.2fx", r.final_loss / reference) : "-") << std::setw(9)
        << r.skipped_steps << std::setw(13) << format("%g", r.final_scale) << "   ";
    if (r.flush_measured) {
      out << format("%5.2f%%", 100.0 * r.flushed_share()) << " (" << r.flushed_grads << " of "
          << r.nonzero_grads << " non-zero)";
    } else {
      out << (r.key == "fp32" ? "    - (nothing rounded)" : "    - (real fp16: not measurable)");
    }
    out << "\n";
  }
}

void write_log_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f = open_for_writing(path);
  f << "step,run,loss,scale,skipped,flushed_share\n";
  for (const RunResult& r : runs) {
    for (const StepRecord& s : r.steps) {
      f << s.step << ',' << r.key << ',' << s.loss << ',' << s.scale << ',' << (s.skipped ? 1 : 0)
        << ',';
      if (r.flush_measured) {
        f << s.flushed_share;
      } else {
        f << "nan";
      }
      f << '\n';
    }
  }
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

void write_summary_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f = open_for_writing(path);
  f << "run,final_loss,skipped_steps,final_scale,flushed_share,flushed,nonzero,overflowed\n";
  for (const RunResult& r : runs) {
    f << r.key << ',' << r.final_loss << ',' << r.skipped_steps << ',' << r.final_scale << ',';
    if (r.flush_measured) {
      f << r.flushed_share();
    } else {
      f << "nan";
    }
    f << ',' << r.flushed_grads << ',' << r.nonzero_grads << ',' << r.overflowed_grads << '\n';
  }
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

}  // namespace mixprec_demo
