// The FP4 part of mixprec's kernel dispatch point (src/core/kernels.cpp has the rest): argument
// checks, then the CPU kernels (src/cpu/fp4.cpp) or the CUDA ones (src/cuda/fp4.cu) for the
// views' device. Declared in include/mixprec/core/fp4.h.
#include "core/dispatch.h"
#include "cpu/fp4.h"
#include "mixprec/core/error.h"
#include "mixprec/core/fp4.h"

#ifdef MIXPREC_WITH_CUDA
#include "cuda/kernels.h"
#endif

namespace mixprec::core {
namespace {

// A float view read as rows of `cols` elements in blocks of `block`, and the buffers beside it:
// q (numel / 2 bytes) and the scales (numel / block bytes).
void check_blocks(const TensorView& view, std::int64_t cols, std::int64_t block,
                  const std::uint8_t* q, const std::uint8_t* scales, const char* who,
                  const char* name) {
  MIXPREC_CHECK(element_size(view.dtype) != 0, who, ": ", name, " has an unsupported dtype (",
                static_cast<int>(view.dtype), "); float32, float64, float16 and bfloat16 are");
  MIXPREC_CHECK(view.numel >= 0, who, ": ", name, " has a negative element count ", view.numel);
  MIXPREC_CHECK(cols > 0 && cols % block == 0, who, ": cols must be a positive multiple of ", block,
                " (the block size), got ", cols);
  MIXPREC_CHECK(view.numel % cols == 0, who, ": ", name, " has ", view.numel,
                " elements, not a multiple of cols = ", cols, " (it is read as rows of cols)");
  MIXPREC_CHECK((view.data != nullptr && q != nullptr && scales != nullptr) || view.numel == 0, who,
                ": a null pointer (", name, ", q or the scales) for ", view.numel, " elements");
}

void check_mode(MxScaleMode mode, const char* who) {
  MIXPREC_CHECK(mode == MxScaleMode::kFloor || mode == MxScaleMode::kRceil, who,
                ": unsupported MxScaleMode ", static_cast<int>(mode), " (kFloor or kRceil)");
}

// Runs on_cpu() for CPU buffers, on_cuda() for CUDA ones (where built).
template <typename OnCpu, typename OnCuda>
void run_fp4(Device device, const char* who, const OnCpu& on_cpu, const OnCuda& on_cuda) {
  if (device.type == DeviceType::kCPU) {
    on_cpu();
    return;
  }
#ifdef MIXPREC_WITH_CUDA
  (void)who;
  on_cuda();
#else
  (void)on_cuda;
  detail::throw_no_cuda(who);
#endif
}

}  // namespace

void quantize_nvfp4_(const TensorView& x, std::int64_t cols, const float* amax, std::uint8_t* q,
                     std::uint8_t* block_scales, const Nvfp4Options& options, void* stream) {
  constexpr const char* kWho = "quantize_nvfp4_";
  check_blocks(x, cols, kNvfp4Block, q, block_scales, kWho, "x");
  MIXPREC_CHECK(amax != nullptr, kWho, ": amax must not be null");
  MIXPREC_CHECK(!options.two_d || (x.numel / cols) % kNvfp4Block == 0, kWho, ": two_d needs a ",
                "row count that is a multiple of 16 (16 x 16 tiles), got ", x.numel / cols,
                " rows of ", cols);
  if (x.numel == 0) return;
  run_fp4(
      x.device, kWho, [&] { cpu::quantize_nvfp4(x, cols, *amax, q, block_scales, options); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_nvfp4(x, cols, amax, q, block_scales, options, stream);
#endif
      });
  (void)stream;
}

void dequantize_nvfp4_(const std::uint8_t* q, const std::uint8_t* block_scales, const float* amax,
                       std::int64_t cols, const TensorView& out, void* stream) {
  constexpr const char* kWho = "dequantize_nvfp4_";
  check_blocks(out, cols, kNvfp4Block, q, block_scales, kWho, "out");
  MIXPREC_CHECK(amax != nullptr, kWho, ": amax must not be null");
  if (out.numel == 0) return;
  run_fp4(
      out.device, kWho, [&] { cpu::dequantize_nvfp4(q, block_scales, *amax, cols, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::dequantize_nvfp4(q, block_scales, amax, cols, out, stream);
#endif
      });
  (void)stream;
}

void quantize_mxfp4_(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                     MxScaleMode mode, void* stream) {
  constexpr const char* kWho = "quantize_mxfp4_";
  check_blocks(x, cols, kMxfp4Block, q, scales, kWho, "x");
  check_mode(mode, kWho);
  if (x.numel == 0) return;
  run_fp4(
      x.device, kWho, [&] { cpu::quantize_mxfp4(x, q, scales, mode); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_mxfp4(x, q, scales, mode, stream);
#endif
      });
  (void)stream;
}

void dequantize_mxfp4_(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                       const TensorView& out, void* stream) {
  constexpr const char* kWho = "dequantize_mxfp4_";
  check_blocks(out, cols, kMxfp4Block, q, scales, kWho, "out");
  if (out.numel == 0) return;
  run_fp4(
      out.device, kWho, [&] { cpu::dequantize_mxfp4(q, scales, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::dequantize_mxfp4(q, scales, out, stream);
#endif
      });
  (void)stream;
}

void hadamard16_(const TensorView& x, std::uint16_t* out, void* stream) {
  constexpr const char* kWho = "hadamard16_";
  MIXPREC_CHECK(element_size(x.dtype) != 0, kWho, ": x has an unsupported dtype (",
                static_cast<int>(x.dtype), "); float32, float64, float16 and bfloat16 are");
  MIXPREC_CHECK(x.numel >= 0 && x.numel % 16 == 0, kWho,
                ": x must have a multiple of 16 elements (runs of 16), got ", x.numel);
  MIXPREC_CHECK((x.data != nullptr && out != nullptr) || x.numel == 0, kWho,
                ": a null pointer (x or out) for ", x.numel, " elements");
  if (x.numel == 0) return;
  run_fp4(
      x.device, kWho, [&] { cpu::hadamard16(x, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::hadamard16(x, out, stream);
#endif
      });
  (void)stream;
}

}  // namespace mixprec::core
