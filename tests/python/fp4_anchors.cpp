// mixprec_fp4_anchors: the C++ half of tests/python/fp4_anchors.py, which holds mixprec's FP4
// casts against torchao 0.18 (nvfp4_quantize, to_mx, f32_to_f4_unpacked, pack_uint4) and
// ml_dtypes' float4_e2m1fn, run in Python.
//
// It links mixprec::core only (no LibTorch): what is compared is the core's CPU kernels.
//
// Usage: mixprec_fp4_anchors OP ...
//   sweep BEGIN COUNT            float32 patterns BEGIN .. BEGIN + COUNT - 1 (uint32): one E2M1
//                                code a byte (float_to_e2m1), to stdout
//   cast DTYPE IN OUT            the E2M1 code of each element of IN, a byte each
//   nvfp4 DTYPE ROWS COLS IN OUT amax_ (NanAmax::kIgnore), then quantize_nvfp4_ (1D):
//                                OUT = amax (float32), block scales (E4M3 bytes), packed codes
//   mx DTYPE ROWS COLS MODE IN OUT  quantize_mxfp4_ with MODE floor | rceil:
//                                OUT = scales (E8M0 bytes), packed codes
//   DTYPE    float32 | float16 | bfloat16 (the elements of IN, little-endian)
// Exit code 0, or 2 on bad arguments or an exception (its message on stderr).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/core/fp4.h"
#include "mixprec/core/kernels.h"

namespace {

using mixprec::core::DType;

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
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  throw std::runtime_error("bad dtype " + name);
}

// IN as a view of `n` elements of `dtype` (n = its size when -1).
mixprec::core::TensorView view_of(std::vector<char>& in, DType dtype, std::int64_t n) {
  const auto size = static_cast<std::int64_t>(element_size(dtype));
  if (n < 0) n = static_cast<std::int64_t>(in.size()) / size;
  if (static_cast<std::int64_t>(in.size()) != n * size) {
    throw std::runtime_error("IN holds " + std::to_string(in.size()) + " bytes, not " +
                             std::to_string(n) + " elements");
  }
  return {in.data(), n, dtype};
}

int run(int argc, char** argv) {
  const std::string op = argc > 1 ? argv[1] : "";
  if (op == "sweep" && argc == 4) {
    const std::uint64_t begin = std::stoull(argv[2]), count = std::stoull(argv[3]);
    std::vector<unsigned char> codes(1u << 20);
    for (std::uint64_t done = 0; done < count;) {
      const std::uint64_t n = std::min<std::uint64_t>(codes.size(), count - done);
      for (std::uint64_t i = 0; i < n; ++i) {
        const auto bits = static_cast<std::uint32_t>(begin + done + i);
        codes[i] = mixprec::core::float_to_e2m1(mixprec::core::bits_to_float(bits));
      }
      if (std::fwrite(codes.data(), 1, n, stdout) != n) throw std::runtime_error("short write");
      done += n;
    }
    return 0;
  }
  if (op == "cast" && argc == 5) {
    std::vector<char> in = read_all(argv[3]);
    const auto x = view_of(in, dtype_of(argv[2]), -1);
    std::vector<char> out;
    for (std::int64_t i = 0; i < x.numel; ++i) {
      float v = 0.0f;
      if (x.dtype == DType::kFloat32) v = reinterpret_cast<const float*>(in.data())[i];
      if (x.dtype == DType::kFloat16) {
        v = mixprec::core::half_bits_to_float(reinterpret_cast<const std::uint16_t*>(in.data())[i]);
      }
      if (x.dtype == DType::kBFloat16) {
        v = mixprec::core::bf16_bits_to_float(reinterpret_cast<const std::uint16_t*>(in.data())[i]);
      }
      out.push_back(static_cast<char>(mixprec::core::float_to_e2m1(v)));
    }
    write_all(argv[4], out);
    return 0;
  }
  const bool nvfp4 = op == "nvfp4" && argc == 7, mx = op == "mx" && argc == 8;
  if (!nvfp4 && !mx) throw std::runtime_error("bad arguments (see the usage in the source)");
  const std::int64_t rows = std::stoll(argv[3]), cols = std::stoll(argv[4]);
  std::vector<char> in = read_all(argv[nvfp4 ? 5 : 6]);
  const auto x = view_of(in, dtype_of(argv[2]), rows * cols);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(x.numel / 2));
  std::vector<char> out;
  if (nvfp4) {
    std::vector<std::uint8_t> scales(static_cast<std::size_t>(x.numel / 16));
    float amax = 0.0f;
    mixprec::core::amax_(x, &amax, nullptr, mixprec::core::NanAmax::kIgnore);
    mixprec::core::quantize_nvfp4_(x, cols, &amax, q.data(), scales.data());
    append(out, &amax, 1);
    append(out, scales.data(), scales.size());
  } else {
    const std::string mode = argv[5];
    if (mode != "floor" && mode != "rceil") throw std::runtime_error("bad mode " + mode);
    std::vector<std::uint8_t> scales(static_cast<std::size_t>(x.numel / 32));
    mixprec::core::quantize_mxfp4_(x, cols, q.data(), scales.data(),
                                   mode == "floor" ? mixprec::core::MxScaleMode::kFloor
                                                   : mixprec::core::MxScaleMode::kRceil);
    append(out, scales.data(), scales.size());
  }
  append(out, q.data(), q.size());
  write_all(argv[nvfp4 ? 6 : 7], out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixprec_fp4_anchors: %s\n", e.what());
    return 2;
  }
}
