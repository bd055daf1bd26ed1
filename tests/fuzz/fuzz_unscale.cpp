// libFuzzer target: the CPU unscale-and-check kernel against the scalar reference, on arbitrary
// sizes, dtypes, alignments and bit patterns (NaN payloads, infinities, subnormals, -0).
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/reference.h"
#include "mixprec/core/kernels.h"

namespace {

using mixprec::core::DType;
using mixprec::core::TensorView;

[[noreturn]] void fail() { __builtin_trap(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 6) return 0;
  // Header: inv_scale bits (4 bytes), thread count, number of views; then per view a dtype byte,
  // a misalignment byte and a 2-byte length; the rest of the input is the element bytes.
  float inv_scale;
  std::memcpy(&inv_scale, data, 4);
  mixprec::core::set_num_threads(1 + data[4] % 4);
  const int views_wanted = 1 + data[5] % 8;
  std::size_t pos = 6;
  std::vector<std::vector<unsigned char>> storage;
  std::vector<TensorView> views;
  for (int v = 0; v < views_wanted && pos + 4 <= size; ++v) {
    const auto dtype = static_cast<DType>(data[pos] % 4);
    const std::size_t elem = mixprec::core::element_size(dtype);
    const std::size_t offset = (data[pos + 1] % 8) * elem;  // misaligned starts
    const std::size_t n = (data[pos + 2] | (data[pos + 3] << 8)) % 5000;
    pos += 4;
    storage.emplace_back(offset + n * elem);
    auto& bytes = storage.back();
    for (std::size_t i = 0; i < n * elem; ++i) {
      bytes[offset + i] = pos < size ? data[pos++] : static_cast<unsigned char>(i * 131);
    }
    views.push_back({bytes.data() + offset, static_cast<std::int64_t>(n), dtype});
  }
  // Expected values from the reference, before the kernel changes anything.
  std::vector<std::vector<std::uint64_t>> expected(views.size());
  bool expect_found = false;
  for (std::size_t v = 0; v < views.size(); ++v) {
    const std::size_t elem = mixprec::core::element_size(views[v].dtype);
    for (std::int64_t i = 0; i < views[v].numel; ++i) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, static_cast<unsigned char*>(views[v].data) + i * elem, elem);
      expect_found |= mixprec::testing::reference_nonfinite(views[v].dtype, bits);
      expected[v].push_back(mixprec::testing::reference_unscaled(views[v].dtype, bits, inv_scale));
    }
  }
  float found = 0.0f;
  mixprec::core::non_finite_check_and_unscale_(views, &found, &inv_scale);
  if ((found == 1.0f) != expect_found) fail();
  for (std::size_t v = 0; v < views.size(); ++v) {
    const std::size_t elem = mixprec::core::element_size(views[v].dtype);
    for (std::int64_t i = 0; i < views[v].numel; ++i) {
      std::uint64_t got = 0;
      std::memcpy(&got, static_cast<unsigned char*>(views[v].data) + i * elem, elem);
      const std::uint64_t want = expected[v][static_cast<std::size_t>(i)];
      if (mixprec::testing::reference_isnan(views[v].dtype, want)) {
        if (!mixprec::testing::reference_isnan(views[v].dtype, got)) fail();
      } else if (got != want) {
        fail();
      }
    }
  }
  return 0;
}
