// Inputs of the CUDA FP4 tests (tests/cuda/fp4_element_test.cpp, cuda_fp4_test.cpp): host tensors
// of every input dtype whose blocks are each of one kind (random normals times exp(3z), zeros and
// -0, subnormal-tiny, huge, NaNs of every kind, +-inf), and byte buffers compared whole.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "mixprec/core/half.h"
#include "mixprec/core/tensor_view.h"

namespace mixprec::core::fp4_test {

inline constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                    DType::kBFloat16};

/// A contiguous host buffer of one dtype.
struct Typed {
  DType dtype = DType::kFloat32;
  std::int64_t n = 0;
  std::vector<unsigned char> bytes;

  Typed(DType d, std::int64_t count)
      : dtype(d), n(count), bytes(static_cast<std::size_t>(count) * element_size(d)) {}
  void* data() { return bytes.data(); }
  TensorView view() { return {bytes.data(), n, dtype}; }
  void set_bits(std::int64_t i, std::uint64_t bits) {
    std::memcpy(bytes.data() + i * element_size(dtype), &bits, element_size(dtype));
  }
  /// Element i as the dtype rounds `v` to nearest even (through float for the 16-bit ones).
  void set(std::int64_t i, double v) {
    switch (dtype) {
      case DType::kFloat32: {
        const float f = static_cast<float>(v);
        std::uint32_t b;
        std::memcpy(&b, &f, 4);
        return set_bits(i, b);
      }
      case DType::kFloat64: {
        std::uint64_t b;
        std::memcpy(&b, &v, 8);
        return set_bits(i, b);
      }
      case DType::kFloat16:
        return set_bits(i, float_to_half_bits(static_cast<float>(v)));
      case DType::kBFloat16:
        return set_bits(i, float_to_bf16_bits(static_cast<float>(v)));
    }
  }
};

/// Bit patterns of the special values, per dtype.
enum class Special { kQuietNan, kSignallingNan, kNegativeNan, kInf, kNegInf, kNegZero };
inline std::uint64_t special_bits(DType dtype, Special s) {
  static constexpr std::uint64_t kBits[4][6] = {
      {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7f800000u, 0xff800000u, 0x80000000u},
      {0x7ff8000000000000u, 0x7ff0000000000001u, 0xfff8000000000000u, 0x7ff0000000000000u,
       0xfff0000000000000u, 0x8000000000000000u},
      {0x7e00u, 0x7c01u, 0xfe00u, 0x7c00u, 0xfc00u, 0x8000u},
      {0x7fc0u, 0x7f81u, 0xffc0u, 0x7f80u, 0xff80u, 0x8000u}};
  const int d = dtype == DType::kFloat32   ? 0
                : dtype == DType::kFloat64 ? 1
                : dtype == DType::kFloat16 ? 2
                                           : 3;
  return kBits[d][static_cast<int>(s)];
}

/// A [rows, cols] tensor cut into runs of `block` elements, each run of one kind: mostly random
/// normals times exp(3z) (a wide spread inside a block), else all zeros (some -0), subnormal-tiny,
/// huge (near the dtype's max), a few NaNs (quiet 0x7fc00000, signalling 0x7f800001 or negative
/// 0xffc00000 and their kin in each dtype) among normals, -0 among normals, and with `inf` a +-inf
/// among normals.
inline Typed make_input(DType dtype, std::int64_t n, std::int64_t block, bool inf,
                        std::mt19937_64& rng) {
  Typed t(dtype, n);
  std::normal_distribution<double> normal;
  const double tiny = dtype == DType::kFloat16 ? 3e-6 : 1e-39;
  const double huge = dtype == DType::kFloat16 ? 2e4 : 1e38;
  for (std::int64_t first = 0; first < n; first += block) {
    const int kind = static_cast<int>(rng() % 16);
    for (std::int64_t i = first; i < first + block && i < n; ++i) {
      const double v = normal(rng) * std::exp(3.0 * normal(rng));
      switch (kind) {
        case 0:
          t.set(i, rng() % 3 == 0 ? -0.0 : 0.0);
          break;
        case 1:
          t.set(i, tiny * normal(rng));
          break;
        case 2:
          t.set(i, huge * normal(rng) / 4);
          break;
        default:
          t.set(i, v);
      }
    }
    const std::int64_t len = std::min(block, n - first);
    auto at = [&] {
      return first + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(len));
    };
    if (kind == 3 || kind == 4) {  // one to three NaNs of the three kinds
      for (int k = 0, count = 1 + static_cast<int>(rng() % 3); k < count; ++k) {
        t.set_bits(at(), special_bits(dtype, static_cast<Special>(rng() % 3)));
      }
    } else if (kind == 5) {
      t.set_bits(at(), special_bits(dtype, Special::kNegZero));
      t.set_bits(at(), special_bits(dtype, Special::kNegZero));
    } else if (kind == 6 && inf) {
      t.set_bits(at(), special_bits(dtype, rng() % 2 == 0 ? Special::kInf : Special::kNegInf));
    } else if (kind == 7 && rng() % 4 == 0) {  // a block of NaNs only
      for (std::int64_t i = first; i < first + len; ++i) {
        t.set_bits(i, special_bits(dtype, static_cast<Special>(rng() % 3)));
      }
    }
  }
  return t;
}

/// n random bytes.
inline std::vector<std::uint8_t> random_bytes(std::size_t n, std::mt19937_64& rng) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

/// The index of the first byte where a and b differ, or -1 (a and b of one size).
inline std::int64_t first_difference(const std::vector<unsigned char>& a,
                                     const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<std::int64_t>(i);
  }
  return -1;
}

/// A buffer's bytes.
template <typename T>
std::vector<unsigned char> as_bytes(const std::vector<T>& v) {
  std::vector<unsigned char> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace mixprec::core::fp4_test
