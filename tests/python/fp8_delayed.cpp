// mixprec_fp8_delayed: the C++ half of tests/python/fp8_delayed.py, which checks the delayed
// scaling rule of the core (core::delayed_scaling_update_, on the CPU) against Transformer
// Engine's published PyTorch functions, re-implemented in that script with torch ops.
//
// Why a separate program: it links mixprec::core only (no LibTorch), so what is compared is the
// core's rule itself, bit for bit, on inputs chosen to hit its corners: 0, inf and NaN amaxes,
// tiny amaxes whose scale overflows (FLT_MAX), margins, both algorithms, windows of 1 to 1024
// iterations, and iterations in which some tensors are not cast (not passed to the update).
//
// Usage: mixprec_fp8_delayed SCENARIO > OUTPUT
// SCENARIO (written by fp8_delayed.py), whitespace-separated lines:
//   tensors N
//   formats F_0 ... F_{N-1}             e4m3 | e5m2
//   config H MARGIN ALGO LAYOUT EVERY NAN
//                                       one or more: history_len, margin, max | most_recent,
//                                       rows (one [H, N] buffer, stride N: TE's and fp8::Linear's
//                                       layout) | columns (a buffer of H per tensor, stride 1),
//                                       how often the histories are printed (below), and
//                                       ignore | propagate (DelayedScaling::nan)
//   it I A_0 ... A_{N-1}                one per iteration, in order: tensor j's amax this
//                                       iteration as the 8 hex digits of its float32 bits, or
//                                       "-" when tensor j is not cast in iteration I
// Every config starts from zero histories and scales of 1 (TE's initial state) and runs all
// iterations: the amax of each cast tensor is stored in its slot 0, then one
// core::delayed_scaling_update_ call updates the cast tensors (in reverse order on odd
// iterations: the order must not matter).
// OUTPUT: "config K" before config K's lines, then per iteration and tensor
//   "u I J SCALE SCALE_INV [H0 ... H_{H-1}]"
// as 8-hex-digit float32 bit patterns (exact, NaN payloads included); the history is printed on
// iterations with I % EVERY == EVERY - 1 and on the last one. Exit code 0, or 2 on bad input or
// an exception (its message on stderr).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/core/fp8.h"

namespace {

using mixprec::core::AmaxAlgo;
using mixprec::core::DelayedScaling;
using mixprec::core::DelayedTensor;
using mixprec::core::Fp8Format;
using mixprec::core::NanAmax;

struct Config {
  DelayedScaling rule;
  bool rows = true;
  std::int64_t every = 1;
};

struct Scenario {
  std::vector<Fp8Format> formats;
  std::vector<Config> configs;
  // amaxes[i][j]: tensor j's amax bits in iteration i; cast[i][j]: whether it was cast.
  std::vector<std::vector<std::uint32_t>> amaxes;
  std::vector<std::vector<bool>> cast;
};

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

std::uint32_t to_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

Scenario read_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  Scenario s;
  std::size_t n = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    if (key == "tensors") {
      words >> n;
    } else if (key == "formats") {
      std::string f;
      while (words >> f) {
        if (f != "e4m3" && f != "e5m2") throw std::runtime_error("bad format " + f);
        s.formats.push_back(f == "e4m3" ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
      }
    } else if (key == "config") {
      Config c;
      std::string algo, layout, nan;
      words >> c.rule.history_len >> c.rule.margin >> algo >> layout >> c.every >> nan;
      if (nan != "ignore" && nan != "propagate") throw std::runtime_error("bad nan " + nan);
      c.rule.nan = nan == "ignore" ? NanAmax::kIgnore : NanAmax::kPropagate;
      if (algo != "max" && algo != "most_recent") throw std::runtime_error("bad algo " + algo);
      if (layout != "rows" && layout != "columns") throw std::runtime_error("bad layout " + layout);
      if (!words || c.every < 1) throw std::runtime_error("bad config line: " + line);
      c.rule.algo = algo == "max" ? AmaxAlgo::kMax : AmaxAlgo::kMostRecent;
      c.rows = layout == "rows";
      s.configs.push_back(c);
    } else if (key == "it") {
      std::size_t i = 0;
      words >> i;
      if (i != s.amaxes.size()) throw std::runtime_error("iterations out of order: " + line);
      s.amaxes.emplace_back(n, 0u);
      s.cast.emplace_back(n, false);
      for (std::size_t j = 0; j < n; ++j) {
        std::string a;
        if (!(words >> a)) throw std::runtime_error("short iteration line: " + line);
        if (a == "-") continue;
        s.amaxes[i][j] = static_cast<std::uint32_t>(std::stoul(a, nullptr, 16));
        s.cast[i][j] = true;
      }
    } else {
      throw std::runtime_error("unknown line: " + line);
    }
  }
  if (n == 0 || s.formats.size() != n || s.configs.empty() || s.amaxes.empty()) {
    throw std::runtime_error("incomplete scenario " + path);
  }
  return s;
}

void run_config(const Scenario& s, const Config& c, std::FILE* out) {
  const std::size_t n = s.formats.size();
  const std::int64_t h = c.rule.history_len;
  std::vector<float> history(static_cast<std::size_t>(h) * n, 0.0f);
  std::vector<float> scale(n, 1.0f), scale_inv(n, 1.0f);
  // Tensor j's slot i: rows, [h, n] row-major (slot i of tensor j at i * n + j); columns, one
  // history of h per tensor (at j * h + i).
  auto slot = [&](std::size_t j, std::int64_t i) -> float& {
    return c.rows ? history[static_cast<std::size_t>(i) * n + j]
                  : history[j * static_cast<std::size_t>(h) + static_cast<std::size_t>(i)];
  };
  const std::size_t iterations = s.amaxes.size();
  for (std::size_t it = 0; it < iterations; ++it) {
    std::vector<DelayedTensor> tensors;
    for (std::size_t j = 0; j < n; ++j) {
      if (!s.cast[it][j]) continue;
      slot(j, 0) = from_bits(s.amaxes[it][j]);
      DelayedTensor t;
      t.amax_history = &slot(j, 0);
      t.stride = c.rows ? static_cast<std::int64_t>(n) : 1;
      t.scale = &scale[j];
      t.scale_inv = &scale_inv[j];
      t.format = s.formats[j];
      tensors.push_back(t);
    }
    if (it % 2 == 1) std::vector<DelayedTensor>(tensors.rbegin(), tensors.rend()).swap(tensors);
    mixprec::core::delayed_scaling_update_(tensors.data(), tensors.size(), c.rule);
    const bool with_history =
        static_cast<std::int64_t>(it) % c.every == c.every - 1 || it + 1 == iterations;
    for (std::size_t j = 0; j < n; ++j) {
      std::fprintf(out, "u %zu %zu %08" PRIx32 " %08" PRIx32, it, j, to_bits(scale[j]),
                   to_bits(scale_inv[j]));
      if (with_history) {
        for (std::int64_t i = 0; i < h; ++i) std::fprintf(out, " %08" PRIx32, to_bits(slot(j, i)));
      }
      std::fputc('\n', out);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: mixprec_fp8_delayed SCENARIO\n";
    return 2;
  }
  try {
    const Scenario s = read_scenario(argv[1]);
    for (std::size_t k = 0; k < s.configs.size(); ++k) {
      std::printf("config %zu\n", k);
      run_config(s, s.configs[k], stdout);
    }
    return std::fflush(stdout) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "mixprec_fp8_delayed: " << e.what() << "\n";
    return 2;
  }
}
