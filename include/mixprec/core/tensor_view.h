// A non-owning view of a dense tensor: the only thing the core knows about tensors.
// Adapters (LibTorch or a user's own engine) describe their buffers with it; see
// src/torch/ for the LibTorch one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mixprec::core {

/// Element types the kernels understand.
enum class DType : std::uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16 };

/// Where a buffer lives.
enum class DeviceType : std::uint8_t { kCPU, kCUDA };

/// A device: its type and index (-1 for the CPU or the current CUDA device).
struct Device {
  DeviceType type = DeviceType::kCPU;  ///< CPU or CUDA
  int index = -1;                      ///< CUDA device ordinal; -1 for the CPU or the current one

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

/// Bytes per element of `dtype`.
constexpr std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

/// A short name of `dtype` for messages ("float32", "float16", ...).
const char* dtype_name(DType dtype);

/// A contiguous run of `numel` elements of type `dtype` starting at `data` on `device`.
/// The view does not own the memory; element order does not matter to the core's kernels,
/// so any non-overlapping dense tensor (a transposed one too) can be described by one view.
///
/// **Example**
/// ```cpp
/// std::vector<float> grad(1024);
/// mixprec::core::TensorView view{grad.data(), 1024, mixprec::core::DType::kFloat32};
/// ```
struct TensorView {
  void* data = nullptr;           ///< first element (may be null when numel == 0)
  std::int64_t numel = 0;         ///< number of elements
  DType dtype = DType::kFloat32;  ///< element type
  Device device = {};             ///< where `data` lives
};

}  // namespace mixprec::core
