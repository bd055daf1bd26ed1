// mixprec_fp8_anchors: the C++ half of tests/python/fp8_anchors.py, which holds mixprec's FP8
// casts against the libraries users move from, run in Python: ml_dtypes (the element
// conversions), torchao's tensorwise casts (current scaling) and torchao's to_mx (MXFP8).
//
// It links mixprec::core only (no LibTorch): what is compared is the core's kernels on the CPU,
// the ones fp8::Linear runs.
//
// Usage: mixprec_fp8_anchors OP DTYPE FORMAT ROWS COLS IN OUT [POW2]
//   OP       decode   IN: 256 codes (bytes); OUT: fp8_bits_to_float of each, float32
//            cast     q = quantize_fp8_(x, scale 1)                      OUT: q
//            current  quantize_fp8_current_ (NanAmax::kPropagate, eps 1e-12, POW2 0 | 1)
//                                                                        OUT: scale (float32), q
//            mx       quantize_mxfp8_ (NanAmax::kPropagate) of ROWS rows of COLS
//                                                                        OUT: scales, q
//            rowwise  quantize_fp8_tiles_ with tiles of 1 x COLS (torchao's rowwise), eps 1e-12,
//                     kPropagate, POW2 0 | 1                            OUT: scale_inv per row, q
//   DTYPE    float32 | float64 | float16 | bfloat16 (the elements of IN, little-endian)
//   FORMAT   e4m3 | e5m2
// Exit code 0, or 2 on bad arguments or an exception (its message on stderr).
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/core/fp8.h"

namespace {

using mixprec::core::DType;
using mixprec::core::Fp8Format;

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

template <typename T>
void append(std::vector<char>& out, const T* data, std::size_t count) {
  const auto* bytes = reinterpret_cast<const char*>(data);
  out.insert(out.end(), bytes, bytes + count * sizeof(T));
}

DType dtype_of(const std::string& name) {
  if (name == "float32") return DType::kFloat32;
  if (name == "float64") return DType::kFloat64;
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  throw std::runtime_error("bad dtype " + name);
}

int run(int argc, char** argv) {
  if (argc < 8) throw std::runtime_error("usage: OP DTYPE FORMAT ROWS COLS IN OUT [POW2]");
  const std::string op = argv[1];
  const DType dtype = dtype_of(argv[2]);
  const std::string format_name = argv[3];
  if (format_name != "e4m3" && format_name != "e5m2") {
    throw std::runtime_error("bad format " + format_name);
  }
  const Fp8Format format = format_name == "e4m3" ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  const std::int64_t rows = std::stoll(argv[4]), cols = std::stoll(argv[5]);
  std::vector<char> in = read_all(argv[6]);
  std::vector<char> out;
  if (op == "decode") {
    for (char c : in) {
      const float v = mixprec::core::fp8_bits_to_float(static_cast<std::uint8_t>(c), format);
      append(out, &v, 1);
    }
    write_all(argv[7], out);
    return 0;
  }
  const std::int64_t n = rows * cols;
  if (static_cast<std::int64_t>(in.size()) != n * static_cast<std::int64_t>(element_size(dtype))) {
    throw std::runtime_error("IN holds " + std::to_string(in.size()) + " bytes, not " +
                             std::to_string(n) + " elements of " + argv[2]);
  }
  const mixprec::core::TensorView x{in.data(), n, dtype};
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n));
  if (op == "cast") {
    const float one = 1.0f;
    mixprec::core::quantize_fp8_(x, q.data(), format, &one);
  } else if (op == "current") {
    mixprec::core::CurrentScaling rule;
    rule.power_of_2_scales = argc > 8 && std::string(argv[8]) == "1";
    rule.nan = mixprec::core::NanAmax::kPropagate;  // torchao's torch.max(torch.abs(x))
    float scale = 0.0f, scale_inv = 0.0f, amax = 0.0f;
    mixprec::core::quantize_fp8_current_(x, q.data(), format, rule, &scale, &scale_inv, &amax);
    append(out, &scale, 1);
  } else if (op == "rowwise") {
    mixprec::core::CurrentScaling rule;
    rule.power_of_2_scales = argc > 8 && std::string(argv[8]) == "1";
    rule.nan = mixprec::core::NanAmax::kPropagate;  // torchao's torch.amax
    std::vector<float> scale_inv(static_cast<std::size_t>(rows));
    mixprec::core::quantize_fp8_tiles_(x, cols, 1, cols, q.data(), scale_inv.data(), format, rule);
    append(out, scale_inv.data(), scale_inv.size());
  } else if (op == "mx") {
    std::vector<std::uint8_t> scales(static_cast<std::size_t>(rows * ((cols + 31) / 32)));
    mixprec::core::quantize_mxfp8_(x, cols, q.data(), scales.data(), format, nullptr,
                                   mixprec::core::NanAmax::kPropagate);  // torchao's torch.amax
    append(out, scales.data(), scales.size());
  } else {
    throw std::runtime_error("bad op " + op);
  }
  append(out, q.data(), q.size());
  write_all(argv[7], out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixprec_fp8_anchors: %s\n", e.what());
    return 2;
  }
}
