// libFuzzer target: the FP4 dequantizes (core::dequantize_nvfp4_ and dequantize_mxfp4_, under
// fp4::dequantize_nvfp4 / dequantize_mxfp4) with arbitrary packed codes, scale bytes and amax bits:
// format, shape and output dtype from the input's first bytes. Every element must be its E2M1 code
// times its block's decode factor (NaN for an MXFP4 block of 255, and where the product is NaN),
// with no read or write out of bounds.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mixprec/core/fp4.h"
#include "mixprec/core/half.h"

namespace core = mixprec::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  const bool nvfp4 = (data[0] & 1) != 0;
  const std::int64_t block = nvfp4 ? core::kNvfp4Block : core::kMxfp4Block;
  const std::int64_t rows = 1 + data[1] % 8;
  const std::int64_t cols = block * (1 + data[2] % 6);
  const core::DType out_dtype = static_cast<core::DType>(data[3] % 4);
  float amax;
  std::memcpy(&amax, data + 4, sizeof amax);
  const std::int64_t n = rows * cols;
  // Exactly sized buffers (ASan sees any read past them); bytes past the input are zero.
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n / 2)),
      scales(static_cast<std::size_t>(n / block));
  std::size_t at = 8;
  for (auto* v : {&scales, &q}) {
    for (auto& b : *v) b = at < size ? data[at++] : 0;
  }
  std::vector<float> out(static_cast<std::size_t>(n));
  const core::TensorView out_view{out.data(), n, core::DType::kFloat32};
  if (nvfp4) {
    core::dequantize_nvfp4_(q.data(), scales.data(), &amax, cols, out_view);
  } else {
    core::dequantize_mxfp4_(q.data(), scales.data(), cols, out_view);
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t s = scales[static_cast<std::size_t>(i / block)];
    const std::uint8_t code = static_cast<std::uint8_t>(q[static_cast<std::size_t>(i / 2)] >> (4 * (i % 2)));
    const float decode = nvfp4 ? core::nvfp4_block_decode(s, amax) : core::e8m0_to_float(s);
    const float want = core::e2m1_to_float(code) * decode;
    const float got = out[static_cast<std::size_t>(i)];
    if (std::isnan(want) ? !std::isnan(got) : std::memcmp(&want, &got, sizeof got) != 0) {
      std::fprintf(stderr, "element %lld: %g, want %g\n", static_cast<long long>(i), got, want);
      std::abort();
    }
  }
  // Every output dtype writes exactly its n elements.
  std::vector<unsigned char> typed(static_cast<std::size_t>(n) * core::element_size(out_dtype));
  const core::TensorView typed_view{typed.data(), n, out_dtype};
  if (nvfp4) {
    core::dequantize_nvfp4_(q.data(), scales.data(), &amax, cols, typed_view);
  } else {
    core::dequantize_mxfp4_(q.data(), scales.data(), cols, typed_view);
  }
  return 0;
}
