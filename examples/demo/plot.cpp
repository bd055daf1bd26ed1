// gnuplot driver of the demo: a wide data file (one column per run), a two-panel script (three
// with the FP8 runs' scales), and
// gnuplot started with posix_spawnp (no shell, so paths need no shell quoting).
#include "plot.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <stdexcept>
#include <utility>
#include <vector>

extern char** environ;

namespace mixprec_demo {
namespace {

// A gnuplot single-quoted string literal: only ' needs escaping, by doubling it.
std::string gp_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

const RunResult* find(const std::vector<RunResult>& runs, const std::string& key) {
  for (const RunResult& r : runs) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

}  // namespace

bool write_plot(const std::string& dir, const std::vector<RunResult>& runs, std::string* message) {
  namespace fs = std::filesystem;
  const fs::path base = fs::absolute(dir);
  const fs::path data = base / "plot.dat";
  const fs::path script = base / "plot.gp";
  const fs::path png = base / "plot.png";

  // Columns: step, loss of each run (in `runs` order), the scaled run's scale and skips, then
  // per FP8 run the smallest and largest scale of linear0's grad_output.
  const RunResult* scaled = find(runs, "fp16_scaled");
  std::vector<std::size_t> fp8_runs;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    if (runs[k].fp8) fp8_runs.push_back(k);
  }
  std::ofstream d(data);
  d << std::setprecision(7) << "# step";
  for (const RunResult& r : runs) d << " loss_" << r.key;
  d << " scale skipped";
  for (std::size_t k : fp8_runs) d << " min_" << runs[k].key << " max_" << runs[k].key;
  d << "\n";
  const std::size_t n = runs.empty() ? 0 : runs.front().steps.size();
  for (std::size_t i = 0; i < n; ++i) {
    d << runs.front().steps[i].step;
    for (const RunResult& r : runs) d << ' ' << (i < r.steps.size() ? r.steps[i].loss : 0.0);
    const bool has = scaled != nullptr && i < scaled->steps.size();
    d << ' ' << (has ? scaled->steps[i].scale : 1.0) << ' '
      << (has && scaled->steps[i].skipped ? 1 : 0);
    for (std::size_t k : fp8_runs) {
      const bool in = i < runs[k].steps.size();
      d << ' ' << (in ? runs[k].steps[i].fp8_grad_scale_min : 0.0) << ' '
        << (in ? runs[k].steps[i].fp8_grad_scale_max : 0.0);
    }
    d << '\n';
  }
  if (!d) throw std::runtime_error("cannot write '" + data.string() + "'");
  d.close();

  // fp32 is drawn last, dashed, so that it stays visible where the scaled runs lie on it.
  const std::size_t scale_col = runs.size() + 2;
  std::int64_t skipped = 0;
  if (scaled != nullptr) skipped = scaled->skipped_steps;
  const bool with_fp8 = !fp8_runs.empty();
  std::ofstream s(script);
  s << "# Redraw with: gnuplot " << script.filename().string() << "\n"
    << "set terminal pngcairo size 1100," << (with_fp8 ? 1250 : 850) << " font 'sans,11'\n"
    << "set output " << gp_quote(png.string()) << "\n"
    << "set multiplot layout " << (with_fp8 ? 3 : 2) << ",1 title 'mixprec demo: what loss "
    << "scaling buys (fp16 rounds gradients below 2^{-25} to zero"
    << (with_fp8 ? ", fp8 E5M2 below 2^{-17}" : "") << ")'\n"
    << "set grid\nset key top right box opaque\nset lmargin 12\n"
    // With 10 runs, the key in two columns in headroom above fp8 no scaling's flat line.
    << (with_fp8 ? "set key maxrows 5\nset offsets 0, 0, graph 0.5, 0\n" : "")
    << "set logscale y\nset format y '10^{%L}'\n"
    << "set ylabel 'training loss (minibatch MSE)'\n"
    << "plot ";
  bool first = true;
  const auto curve = [&](std::size_t k, const char* style) {
    s << (first ? "" : ", ") << gp_quote(data.string()) << " using 1:" << k + 2 << " with lines "
      << style << " title " << gp_quote(runs[k].name);
    first = false;
  };
  // Failing runs first, so that the runs that track fp32 are drawn over them.
  const std::pair<const char*, const char*> styles[] = {
      {"fp16", "lw 1.5 lc rgb '#d62728'"},        {"fp8_none", "lw 1.5 lc rgb '#ff7f0e'"},
      {"bf16", "lw 1.5 lc rgb '#1f77b4'"},        {"fp8_mxfp8", "lw 1.5 lc rgb '#e377c2'"},
      {"fp8_rowwise", "lw 1.5 lc rgb '#17becf'"}, {"fp8_blockwise", "lw 1.5 lc rgb '#bcbd22'"},
      {"fp8_current", "lw 1.5 lc rgb '#8c564b'"}, {"fp8_delayed", "lw 1.5 lc rgb '#9467bd'"},
      {"fp16_scaled", "lw 2.5 lc rgb '#2ca02c'"}, {"fp32", "lw 1.5 dt (6,6) lc rgb 'black'"},
  };
  for (const auto& [key, style] : styles) {
    for (std::size_t k = 0; k < runs.size(); ++k) {
      if (runs[k].key == key) curve(k, style);
    }
  }
  s << "\nset logscale y 2\nset format y '2^{%L}'\nset offsets 0, 0, graph 0.08, graph 0.02\n"
    << "set key top left maxrows auto\nset ylabel 'loss scale'\n"
    << (with_fp8 ? "" : "set xlabel 'step'\n") << "plot " << gp_quote(data.string())
    << " using 1:" << scale_col
    << " with steps lw 2 lc rgb '#2ca02c' title 'GradScaler scale (grows every growth_interval "
    << "clean steps)' noenhanced, " << gp_quote(data.string()) << " using 1:($" << scale_col + 1
    << " > 0 ? $" << scale_col << " : 1/0) with points pt 7 ps 1 lc rgb '#d62728' title "
    << gp_quote("skipped steps (inf/NaN gradients): " + std::to_string(skipped)) << "\n";
  if (with_fp8) {
    // The FP8 scales of one tensor: what fp16's one loss scale became, per tensor or per block.
    s << "set ylabel 'fp8 scale of linear0 grad_output' noenhanced\nset xlabel 'step'\n"
      << "set key top right\nset offsets 0, 0, graph 0.3, graph 0.05\nplot ";
    first = true;
    // MXFP8's band first, so that the lines are drawn over it.
    for (std::size_t j = fp8_runs.size(); j-- > 0;) {
      const RunResult& r = runs[fp8_runs[j]];
      const std::size_t lo = scale_col + 2 + 2 * j;
      const char* color = r.key == "fp8_none"        ? "#ff7f0e"
                          : r.key == "fp8_delayed"   ? "#9467bd"
                          : r.key == "fp8_current"   ? "#8c564b"
                          : r.key == "fp8_rowwise"   ? "#17becf"
                          : r.key == "fp8_blockwise" ? "#bcbd22"
                                                     : "#e377c2";
      s << (first ? "" : ", ") << gp_quote(data.string());
      if (r.key == "fp8_mxfp8" || r.key == "fp8_rowwise" || r.key == "fp8_blockwise") {
        s << " using 1:" << lo << ":" << lo + 1 << " with filledcurves fs transparent solid 0.3 "
          << "lc rgb '" << color << "' title "
          << gp_quote(r.name + (r.key == "fp8_mxfp8"
                                    ? ": smallest to largest of its blocks' scales (x 2^{127-e})"
                                : r.key == "fp8_rowwise"
                                    ? ": smallest to largest of its rows' scales"
                                    : ": smallest to largest of its tiles' scales"));
      } else {
        s << " using 1:" << lo << " with lines lw 2 lc rgb '" << color << "' title "
          << gp_quote(r.name + (r.key == "fp8_none"      ? ": 1"
                                : r.key == "fp8_delayed" ? ": E5M2 max / max of the amax history"
                                                         : ": E5M2 max / this gradient's amax"));
      }
      first = false;
    }
    s << "\n";
  }
  s << "unset multiplot\n";
  if (!s) throw std::runtime_error("cannot write '" + script.string() + "'");
  s.close();

  std::error_code ignored;
  fs::remove(png, ignored);  // an old picture must not pass for a new one
  std::string program = "gnuplot";
  std::string script_arg = script.string();
  char* argv[] = {program.data(), script_arg.data(), nullptr};
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ);
  if (spawn_error != 0) {
    *message = spawn_error == ENOENT
                   ? "gnuplot is not installed (Debian: apt-get install gnuplot-nox); "
                     "no plot.png, the CSV log is written"
                   : std::string("cannot start gnuplot: ") + std::strerror(spawn_error);
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fs::exists(png)) {
    *message = "gnuplot failed on " + script.string() + " (see its messages above)";
    return false;
  }
  *message = png.string();
  return true;
}

}  // namespace mixprec_demo
