// libFuzzer target: MXFP8 dequantize (core::dequantize_mxfp8_, under fp8::dequantize_mxfp8) with
// arbitrary codes and E8M0 scale bytes: shape, format and output dtype from the input's first
// bytes. Every element must be its code times its block's scale (NaN for a 0xff block), with no
// read or write out of bounds.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mixprec/core/fp8.h"
#include "mixprec/core/half.h"

namespace core = mixprec::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::int64_t rows = 1 + data[0] % 8;
  const std::int64_t cols = 1 + data[1] % 100;
  const core::Fp8Format format = data[2] % 2 ? core::Fp8Format::kE5M2 : core::Fp8Format::kE4M3;
  const std::int64_t n = rows * cols, per_row = (cols + 31) / 32;
  // Exactly sized buffers (ASan sees any read past them); bytes past the input are zero.
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n)), scales(
      static_cast<std::size_t>(rows * per_row));
  std::size_t at = 3;
  for (auto* v : {&scales, &q}) {
    for (auto& b : *v) b = at < size ? data[at++] : 0;
  }
  std::vector<float> out(static_cast<std::size_t>(n));
  core::dequantize_mxfp8_(q.data(), scales.data(), cols,
                          format, {out.data(), n, core::DType::kFloat32});
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t e = scales[static_cast<std::size_t>(i / cols * per_row + i % cols / 32)];
    const float want = core::fp8_bits_to_float(q[static_cast<std::size_t>(i)], format) *
                       core::e8m0_to_float(e);
    const float got = out[static_cast<std::size_t>(i)];
    if (std::isnan(want) ? !std::isnan(got)
                         : std::memcmp(&want, &got, sizeof got) != 0) {
      std::fprintf(stderr, "element %lld: %g, want %g\n", static_cast<long long>(i), got, want);
      std::abort();
    }
  }
  std::vector<std::uint16_t> half(static_cast<std::size_t>(n));
  core::dequantize_mxfp8_(q.data(), scales.data(), cols, format,
                          {half.data(), n, core::DType::kBFloat16});
  return 0;
}
