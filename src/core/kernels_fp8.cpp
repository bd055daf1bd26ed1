// The FP8 half of mixprec's kernel dispatch point (src/core/kernels.cpp has the rest): argument
// checks, then the CPU kernels (src/cpu/fp8.cpp) or the CUDA ones (src/cuda/fp8.cu) for the
// views' device. Declared in include/mixprec/core/fp8.h.
#include <string>

#include "core/dispatch.h"
#include "core/fp8_ops.h"
#include "cpu/fp8.h"
#include "mixprec/core/error.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/kernels.h"

#ifdef MIXPREC_WITH_CUDA
#include "cuda/kernels.h"
#endif

namespace mixprec::core {

// ---- FP8 (include/mixprec/core/fp8.h) ----------------------------------------------------------

const char* fp8_format_name(Fp8Format format) {
  switch (format) {
    case Fp8Format::kE4M3:
      return "e4m3";
    case Fp8Format::kE5M2:
      return "e5m2";
  }
  return "unknown";
}

namespace {

void check_format(Fp8Format format, const char* who) {
  MIXPREC_CHECK(format == Fp8Format::kE4M3 || format == Fp8Format::kE5M2, who,
                ": unsupported FP8 format ", static_cast<int>(format),
                " (Fp8Format::kE4M3 or kE5M2)");
}

void check_nan(NanAmax nan, const char* who) {
  MIXPREC_CHECK(nan == NanAmax::kIgnore || nan == NanAmax::kPropagate, who,
                ": unsupported NanAmax ", static_cast<int>(nan), " (kIgnore or kPropagate)");
}

// A float input or output view.
void check_fp8_view(const TensorView& view, const char* who, const char* name) {
  MIXPREC_CHECK(element_size(view.dtype) != 0, who, ": ", name, " has an unsupported dtype (",
                static_cast<int>(view.dtype), "); float32, float64, float16 and bfloat16 are");
  MIXPREC_CHECK(view.numel >= 0, who, ": ", name, " has a negative element count ", view.numel);
  MIXPREC_CHECK(view.data != nullptr || view.numel == 0, who, ": ", name, " has ", view.numel,
                " elements but a null data pointer");
}

// The view, and the byte buffer `q` of as many elements beside it.
void check_fp8_view(const TensorView& view, const char* who, const char* name,
                    const std::uint8_t* q) {
  check_fp8_view(view, who, name);
  MIXPREC_CHECK(q != nullptr || view.numel == 0, who, ": q is null but ", name, " has ", view.numel,
                " elements");
}

void check_mx(const TensorView& view, std::int64_t cols, const std::uint8_t* scales,
              const char* who, const char* name) {
  MIXPREC_CHECK(cols > 0, who, ": cols must be > 0, got ", cols);
  MIXPREC_CHECK(view.numel % cols == 0, who, ": ", name, " has ", view.numel,
                " elements, not a multiple of cols = ", cols, " (it is read as rows of cols)");
  MIXPREC_CHECK(scales != nullptr || view.numel == 0, who, ": scales is null but ", name, " has ",
                view.numel, " elements");
}

// Runs on_cpu() for CPU buffers, on_cuda() for CUDA ones (where built).
template <typename OnCpu, typename OnCuda>
void run_fp8(Device device, const char* who, const OnCpu& on_cpu, const OnCuda& on_cuda) {
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

void amax_(const TensorView& x, float* amax, void* stream, NanAmax nan) {
  constexpr const char* kWho = "amax_";
  check_fp8_view(x, kWho, "x");
  check_nan(nan, kWho);
  MIXPREC_CHECK(amax != nullptr, kWho, ": amax must not be null");
  run_fp8(
      x.device, kWho, [&] { cpu::amax(x, amax, nan); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::amax(x, amax, nan, stream);
#endif
      });
  (void)stream;
}

void quantize_fp8_(const TensorView& x, std::uint8_t* q, Fp8Format format, const float* scale,
                   float* amax, void* stream, NanAmax nan) {
  constexpr const char* kWho = "quantize_fp8_";
  check_format(format, kWho);
  check_fp8_view(x, kWho, "x", q);
  MIXPREC_CHECK(scale != nullptr, kWho, ": scale must not be null");
  check_nan(nan, kWho);
  run_fp8(
      x.device, kWho, [&] { cpu::quantize_fp8(x, q, format, *scale, amax, nan); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_fp8(x, q, format, scale, amax, nan, stream);
#endif
      });
  (void)stream;
}

void quantize_fp8_current_(const TensorView& x, std::uint8_t* q, Fp8Format format,
                           const CurrentScaling& rule, float* scale, float* scale_inv, float* amax,
                           void* stream) {
  constexpr const char* kWho = "quantize_fp8_current_";
  check_format(format, kWho);
  check_fp8_view(x, kWho, "x", q);
  MIXPREC_CHECK(scale != nullptr && scale_inv != nullptr && amax != nullptr, kWho,
                ": scale, scale_inv and amax must not be null");
  MIXPREC_CHECK(rule.eps >= 0.0f && !is_nonfinite(rule.eps), kWho,
                ": CurrentScaling::eps must be finite and >= 0, got ", rule.eps);
  check_nan(rule.nan, kWho);
  run_fp8(
      x.device, kWho,
      [&] {
        float found = 0.0f;
        cpu::amax(x, &found, rule.nan);
        *amax = found;
        *scale = current_scale(found, fp8_max(format), rule);
        *scale_inv = 1.0f / *scale;
        cpu::quantize_fp8(x, q, format, *scale, nullptr, NanAmax::kPropagate);
      },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_fp8_current(x, q, format, rule, scale, scale_inv, amax, stream);
#endif
      });
  (void)stream;
}

void dequantize_fp8_(const std::uint8_t* q, Fp8Format format, const float* scale_inv,
                     const TensorView& out, void* stream) {
  constexpr const char* kWho = "dequantize_fp8_";
  check_format(format, kWho);
  check_fp8_view(out, kWho, "out", q);
  MIXPREC_CHECK(scale_inv != nullptr, kWho, ": scale_inv must not be null");
  run_fp8(
      out.device, kWho, [&] { cpu::dequantize_fp8(q, format, *scale_inv, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::dequantize_fp8(q, format, scale_inv, out, stream);
#endif
      });
  (void)stream;
}

void quantize_mxfp8_(const TensorView& x, std::int64_t cols, std::uint8_t* q, std::uint8_t* scales,
                     Fp8Format format, void* stream, NanAmax nan) {
  constexpr const char* kWho = "quantize_mxfp8_";
  check_format(format, kWho);
  check_fp8_view(x, kWho, "x", q);
  check_mx(x, cols, scales, kWho, "x");
  check_nan(nan, kWho);
  run_fp8(
      x.device, kWho, [&] { cpu::quantize_mxfp8(x, cols, q, scales, format, nan); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_mxfp8(x, cols, q, scales, format, nan, stream);
#endif
      });
  (void)stream;
}

void dequantize_mxfp8_(const std::uint8_t* q, const std::uint8_t* scales, std::int64_t cols,
                       Fp8Format format, const TensorView& out, void* stream) {
  constexpr const char* kWho = "dequantize_mxfp8_";
  check_format(format, kWho);
  check_fp8_view(out, kWho, "out", q);
  check_mx(out, cols, scales, kWho, "out");
  run_fp8(
      out.device, kWho, [&] { cpu::dequantize_mxfp8(q, scales, cols, format, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::dequantize_mxfp8(q, scales, cols, format, out, stream);
#endif
      });
  (void)stream;
}

namespace {
// x (or out) read as rows of cols, cut into tiles of tile_rows x tile_cols.
void check_tiles(const TensorView& view, std::int64_t cols, std::int64_t tile_rows,
                 std::int64_t tile_cols, const float* scale_inv, const char* who,
                 const char* name) {
  MIXPREC_CHECK(cols > 0, who, ": cols must be > 0, got ", cols);
  MIXPREC_CHECK(view.numel % cols == 0, who, ": ", name, " has ", view.numel,
                " elements, not a multiple of cols = ", cols, " (it is read as rows of cols)");
  MIXPREC_CHECK(tile_rows > 0 && tile_cols > 0, who, ": tiles must be at least 1 x 1, got ",
                tile_rows, " x ", tile_cols);
  MIXPREC_CHECK(scale_inv != nullptr || view.numel == 0, who, ": scale_inv is null but ", name,
                " has ", view.numel, " elements");
}
}  // namespace

void quantize_fp8_tiles_(const TensorView& x, std::int64_t cols, std::int64_t tile_rows,
                         std::int64_t tile_cols, std::uint8_t* q, float* scale_inv,
                         Fp8Format format, const CurrentScaling& rule, void* stream) {
  constexpr const char* kWho = "quantize_fp8_tiles_";
  check_format(format, kWho);
  check_fp8_view(x, kWho, "x", q);
  check_tiles(x, cols, tile_rows, tile_cols, scale_inv, kWho, "x");
  MIXPREC_CHECK(rule.eps >= 0.0f && !is_nonfinite(rule.eps), kWho,
                ": CurrentScaling::eps must be finite and >= 0, got ", rule.eps);
  check_nan(rule.nan, kWho);
  run_fp8(
      x.device, kWho,
      [&] { cpu::quantize_fp8_tiles(x, cols, tile_rows, tile_cols, q, scale_inv, format, rule); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::quantize_fp8_tiles(x, cols, tile_rows, tile_cols, q, scale_inv, format, rule,
                                 stream);
#endif
      });
  (void)stream;
}

void dequantize_fp8_tiles_(const std::uint8_t* q, const float* scale_inv, std::int64_t cols,
                           std::int64_t tile_rows, std::int64_t tile_cols, Fp8Format format,
                           const TensorView& out, void* stream) {
  constexpr const char* kWho = "dequantize_fp8_tiles_";
  check_format(format, kWho);
  check_fp8_view(out, kWho, "out", q);
  check_tiles(out, cols, tile_rows, tile_cols, scale_inv, kWho, "out");
  run_fp8(
      out.device, kWho,
      [&] { cpu::dequantize_fp8_tiles(q, scale_inv, cols, tile_rows, tile_cols, format, out); },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::dequantize_fp8_tiles(q, scale_inv, cols, tile_rows, tile_cols, format, out, stream);
#endif
      });
  (void)stream;
}

void delayed_scaling_update_(const DelayedTensor* tensors, std::size_t count,
                             const DelayedScaling& rule, Device device, void* stream) {
  constexpr const char* kWho = "delayed_scaling_update_";
  if (count == 0) return;
  MIXPREC_CHECK(tensors != nullptr, kWho, ": tensors is null but count is ", count);
  MIXPREC_CHECK(rule.history_len >= 1, kWho, ": DelayedScaling::history_len must be >= 1, got ",
                rule.history_len);
  MIXPREC_CHECK(rule.algo == AmaxAlgo::kMax || rule.algo == AmaxAlgo::kMostRecent, kWho,
                ": unsupported AmaxAlgo ", static_cast<int>(rule.algo));
  check_nan(rule.nan, kWho);
  // delayed_scale() divides by 2^margin as a normal float power of two.
  MIXPREC_CHECK(rule.margin >= kMinMargin && rule.margin <= kMaxMargin, kWho,
                ": DelayedScaling::margin must be in [", kMinMargin, ", ", kMaxMargin, "], got ",
                rule.margin);
  for (std::size_t i = 0; i < count; ++i) {
    const DelayedTensor& t = tensors[i];
    MIXPREC_CHECK(t.amax_history != nullptr && t.scale != nullptr && t.scale_inv != nullptr, kWho,
                  ": tensor ", i, ": amax_history, scale and scale_inv must not be null");
    MIXPREC_CHECK(t.stride >= 1, kWho, ": tensor ", i, ": stride must be >= 1, got ", t.stride);
    check_format(t.format, kWho);
  }
  run_fp8(
      device, kWho,
      [&] {
        for (std::size_t i = 0; i < count; ++i) delayed_update_one(tensors[i], rule);
      },
      [&] {
#ifdef MIXPREC_WITH_CUDA
        cuda::delayed_scaling_update(tensors, count, rule, stream);
#endif
      });
  (void)stream;
}

}  // namespace mixprec::core
