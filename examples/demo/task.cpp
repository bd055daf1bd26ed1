// The demo's data: the embedded teacher-network regression and the CSV loader.
#include "task.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace mixprec_demo {

Dataset make_default_task(std::uint64_t seed, double target_rms, std::int64_t samples,
                          std::int64_t features) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  const std::int64_t teacher_hidden = 32;
  torch::Tensor x = torch::randn({samples, features});
  torch::Tensor w1 = torch::randn({features, teacher_hidden}) / std::sqrt(double(features));
  torch::Tensor b1 = 0.5 * torch::randn({teacher_hidden});
  torch::Tensor w2 = torch::randn({teacher_hidden, 1}) / std::sqrt(double(teacher_hidden));
  torch::Tensor t = torch::tanh(x.matmul(w1) + b1).matmul(w2);
  t = (t - t.mean()) / t.std();
  Dataset d;
  d.x = x;
  d.y = (target_rms * t).contiguous();
  d.target_rms = d.y.pow(2).mean().sqrt().item<double>();
  std::ostringstream desc;
  desc << "embedded task (seed " << seed << "): " << samples << " samples, " << features
       << " features, target = " << target_rms << " * (a random tanh network of the inputs)";
  d.description = desc.str();
  return d;
}

namespace {

// Splits one CSV line into numbers; returns false (and the failing column) when a cell is not one.
bool parse_row(const std::string& line, std::vector<double>& row, std::size_t& bad_column) {
  row.clear();
  std::stringstream cells(line);
  std::string cell;
  while (std::getline(cells, cell, ',')) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(cell, &used);
    } catch (const std::exception&) {
      bad_column = row.size() + 1;
      return false;
    }
    if (cell.find_first_not_of(" \t\r", used) != std::string::npos || !std::isfinite(v)) {
      bad_column = row.size() + 1;
      return false;
    }
    row.push_back(v);
  }
  return true;
}

}  // namespace

Dataset load_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--csv: cannot open '" + path + "'");
  std::vector<double> values;
  std::vector<double> row;
  std::size_t columns = 0;
  std::int64_t rows = 0;
  std::string line;
  for (std::int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    std::size_t bad_column = 0;
    if (!parse_row(line, row, bad_column)) {
      if (line_no == 1) continue;  // a header
      throw std::runtime_error("--csv: " + path + ":" + std::to_string(line_no) + ": column " +
                               std::to_string(bad_column) + " is not a finite number");
    }
    if (columns == 0) columns = row.size();
    if (row.size() != columns) {
      throw std::runtime_error("--csv: " + path + ":" + std::to_string(line_no) + ": " +
                               std::to_string(row.size()) + " columns, the first row had " +
                               std::to_string(columns));
    }
    values.insert(values.end(), row.begin(), row.end());
    ++rows;
  }
  if (columns < 2 || rows < 2) {
    throw std::runtime_error("--csv: " + path +
                             " needs at least 2 numeric columns (features..., target) and 2 rows");
  }
  torch::Tensor all = torch::tensor(values, torch::kDouble).view({rows, std::int64_t(columns)});
  torch::Tensor x = all.slice(1, 0, std::int64_t(columns) - 1);
  // Standardize features; a constant column stays 0 instead of dividing by 0.
  torch::Tensor std = x.std(0, /*unbiased=*/true, /*keepdim=*/true).clamp_min(1e-12);
  Dataset d;
  d.x = ((x - x.mean(0, true)) / std).to(torch::kFloat).contiguous();
  d.y = all.slice(1, std::int64_t(columns) - 1).to(torch::kFloat).contiguous();
  d.target_rms = d.y.pow(2).mean().sqrt().item<double>();
  if (d.target_rms == 0)
    throw std::runtime_error("--csv: " + path + ": the target column is all 0");
  std::ostringstream desc;
  desc << path << ": " << rows << " samples, " << columns - 1 << " features (standardized), "
       << "target RMS " << d.target_rms << " (kept as is)";
  d.description = desc.str();
  return d;
}

}  // namespace mixprec_demo
