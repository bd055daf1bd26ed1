// mixprec::fp4 on LibTorch tensors (include/mixprec/fp4.h): NVFP4 and MXFP4 quantize and
// dequantize. Argument checks (the dequantize inputs are built by users: every size, dtype and
// device is checked), then the core's FP4 kernels (mixprec/core/fp4.h) through detail::on_device.
#include "mixprec/fp4.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

#include "mixprec/core/fp8.h"  // core::amax_
#include "torch/fp8/fp4_detail.h"
#include "torch/views.h"

namespace mixprec::fp4 {
namespace {

std::uint8_t* bytes(const at::Tensor& t) { return static_cast<std::uint8_t*>(t.data_ptr()); }

bool is_float_input(at::ScalarType type) {
  return type == at::kFloat || type == at::kBFloat16 || type == at::kHalf;
}

// `sizes` with the last dimension multiplied by num / den (exact: the callers checked it).
std::vector<std::int64_t> with_last(at::IntArrayRef sizes, std::int64_t num, std::int64_t den) {
  std::vector<std::int64_t> shape(sizes.begin(), sizes.end());
  shape.back() = shape.back() * num / den;
  return shape;
}

// The input of a quantize op, checked, and contiguous: its blocks are then runs of memory, the
// rows of the core's view.
at::Tensor checked_input(const at::Tensor& x, std::int64_t block, const char* format,
                         const char* who) {
  TORCH_CHECK(x.defined(), who, ": expected a defined tensor");
  TORCH_CHECK(x.layout() == at::kStrided, who, ": expected a strided (dense) tensor, got layout ",
              x.layout());
  TORCH_CHECK(is_float_input(x.scalar_type()), who,
              ": expected a float32, bfloat16 or float16 tensor, got ", x.scalar_type());
  mixprec::detail::to_core_device(x.device(), who);
  TORCH_CHECK(x.dim() >= 1, who,
              ": expected a tensor of at least one dimension (blocks run along the last one), "
              "got a 0-dim tensor");
  TORCH_CHECK(x.size(-1) % block == 0, who, ": the last dimension (size ", x.size(-1),
              ") must be a multiple of ", block, ", the ", format,
              " block size (blocks run along it; pad it to whole blocks)");
  return x.contiguous();
}

void check_out_dtype(at::ScalarType out_dtype, const char* who) {
  TORCH_CHECK(is_float_input(out_dtype), who,
              ": out_dtype must be float32, bfloat16 or float16, got ", out_dtype);
}

void check_same_device(const at::Tensor& t, const at::Tensor& data, const char* who,
                       const char* name) {
  TORCH_CHECK(t.device() == data.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              data.device(), " and ", t.device(), "! (", who, ": ", name, ")");
}

// The packed data of a dequantize op, checked: uint8 or float4_e2m1fn_x2, at least one
// dimension, K/2 bytes along the last with K a multiple of `block`. Returns the output's shape.
std::vector<std::int64_t> checked_data(const at::Tensor& data, std::int64_t block,
                                       const char* format, const char* who) {
  TORCH_CHECK(data.defined(), who, ": data must be a defined tensor");
  TORCH_CHECK(data.layout() == at::kStrided, who,
              ": data must be a strided (dense) tensor, got layout ", data.layout());
#if MIXPREC_TORCH_FLOAT4
  TORCH_CHECK(data.scalar_type() == at::kByte || data.scalar_type() == at::kFloat4_e2m1fn_x2, who,
              ": data must be packed E2M1 of dtype Byte or Float4_e2m1fn_x2, got ",
              data.scalar_type());
#else
  TORCH_CHECK(data.scalar_type() == at::kByte, who,
              ": data must be packed E2M1 of dtype Byte, got ", data.scalar_type());
#endif
  mixprec::detail::to_core_device(data.device(), who);
  TORCH_CHECK(data.dim() >= 1, who, ": data must have at least one dimension, got a 0-dim tensor");
  TORCH_CHECK(data.size(-1) % (block / 2) == 0, who, ": data's last dimension (size ",
              data.size(-1), ") must be a multiple of ", block / 2, ": it holds K/2 bytes, K a ",
              "multiple of the ", format, " block size ", block);
  return with_last(data.sizes(), 2, 1);
}

// A dequantize op's scales, checked against its data: `dtype`, one per block of `block` along
// the last dimension (K / block), on the data's device.
void check_scales(const at::Tensor& scales, const at::Tensor& data, at::ScalarType dtype,
                  std::int64_t block, const char* name, const char* what, const char* who) {
  TORCH_CHECK(scales.defined(), who, ": ", name, " must be a defined tensor");
  TORCH_CHECK(scales.layout() == at::kStrided, who, ": ", name,
              " must be a strided (dense) tensor, got layout ", scales.layout());
  TORCH_CHECK(scales.scalar_type() == dtype, who, ": ", name, " must be of dtype ", dtype, " (",
              what, "), got ", scales.scalar_type());
  check_same_device(scales, data, who, name);
  const std::vector<std::int64_t> expected = with_last(data.sizes(), 2, block);
  TORCH_CHECK(scales.sizes() == at::IntArrayRef(expected), who, ": ", name, " of shape ",
              scales.sizes(), " do not fit data of shape ", data.sizes(), " (expected ",
              at::IntArrayRef(expected), ": one per block of ", block,
              " elements, K/2 bytes of data to K/", block, " scales along the last dimension)");
}

}  // namespace

// ---- NVFP4 --------------------------------------------------------------------------------------

Nvfp4Tensor quantize_nvfp4(const at::Tensor& x, bool two_d) {
  core::Nvfp4Options rule;  // round to nearest even, no RHT (api.md)
  rule.two_d = two_d;
  return detail::quantize_nvfp4(x, rule);
}

namespace detail {

Nvfp4Tensor quantize_nvfp4(const at::Tensor& x, const core::Nvfp4Options& rule,
                           const std::function<void(at::Tensor&)>& reduce_amax) {
  constexpr const char* kWho = "fp4::quantize_nvfp4";
  const at::Tensor input = checked_input(x, core::kNvfp4Block, "NVFP4", kWho);
  if (rule.two_d) {
    // Tiles per matrix of the last two dimensions: the core's 16-row bands of the flattened
    // rows are those tiles when the second-to-last dimension is a multiple of 16.
    TORCH_CHECK(x.dim() >= 2, kWho,
                ": two_d (16 x 16 tiles of the last two dimensions) needs at least two "
                "dimensions, got a 1-dim tensor");
    TORCH_CHECK(x.size(-2) % core::kNvfp4Block == 0, kWho,
                ": two_d needs the second-to-last dimension (size ", x.size(-2),
                ") to be a multiple of 16, the tile side (16 x 16 tiles of each matrix)");
  }
  const at::TensorOptions options = x.options();
  Nvfp4Tensor out{
      at::empty(with_last(x.sizes(), 1, 2), options.dtype(kPackedDtype)),
      at::empty(with_last(x.sizes(), 1, core::kNvfp4Block), options.dtype(at::kFloat8_e4m3fn)),
      at::zeros({1}, options.dtype(at::kFloat))};
  if (input.numel() == 0) return out;
  const core::TensorView view = mixprec::detail::to_view(input, kWho);
  float* amax = out.amax.data_ptr<float>();
  mixprec::detail::on_device(x.device(), [&](void* stream) {
    core::amax_(view, amax, stream, core::NanAmax::kIgnore);  // TE's kernels skip NaN (fmaxf)
  });
  if (reduce_amax) reduce_amax(out.amax);  // a collective: every rank casts with the max
  mixprec::detail::on_device(x.device(), [&](void* stream) {
    core::quantize_nvfp4_(view, x.size(-1), amax, bytes(out.data), bytes(out.block_scales), rule,
                          stream);
  });
  return out;
}

at::Tensor hadamard16(const at::Tensor& x) {
  constexpr const char* kWho = "fp4::hadamard16";
  const at::Tensor input = checked_input(x, core::kNvfp4Block, "RHT", kWho);
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
  if (input.numel() == 0) return out;
  const core::TensorView view = mixprec::detail::to_view(input, kWho);
  auto* y = static_cast<std::uint16_t*>(out.data_ptr());
  mixprec::detail::on_device(x.device(), [&](void* stream) { core::hadamard16_(view, y, stream); });
  return out;
}

}  // namespace detail

at::Tensor dequantize_nvfp4(const Nvfp4Tensor& q, at::ScalarType out_dtype) {
  constexpr const char* kWho = "fp4::dequantize_nvfp4";
  check_out_dtype(out_dtype, kWho);
  const std::vector<std::int64_t> shape = checked_data(q.data, core::kNvfp4Block, "NVFP4", kWho);
  check_scales(q.block_scales, q.data, at::kFloat8_e4m3fn, core::kNvfp4Block, "block_scales",
               "E4M3 block scales", kWho);
  TORCH_CHECK(q.amax.defined(), kWho, ": amax must be a defined tensor");
  TORCH_CHECK(q.amax.layout() == at::kStrided, kWho,
              ": amax must be a strided (dense) tensor, got layout ", q.amax.layout());
  TORCH_CHECK(q.amax.numel() == 1, kWho, ": amax must be a 1-element tensor, got ", q.amax.numel(),
              " elements");
  TORCH_CHECK(q.amax.scalar_type() == at::kFloat, kWho, ": amax must be a float tensor, got ",
              q.amax.scalar_type());
  check_same_device(q.amax, q.data, kWho, "amax");
  at::Tensor out = at::empty(shape, q.data.options().dtype(out_dtype));
  if (out.numel() == 0) return out;
  const core::TensorView view = mixprec::detail::to_view(out, kWho);
  const at::Tensor data = q.data.contiguous();
  const at::Tensor scales = q.block_scales.contiguous();
  const at::Tensor amax = q.amax.contiguous();
  mixprec::detail::on_device(out.device(), [&](void* stream) {
    core::dequantize_nvfp4_(bytes(data), bytes(scales), amax.data_ptr<float>(), shape.back(), view,
                            stream);
  });
  return out;
}

// ---- MXFP4 --------------------------------------------------------------------------------------

Mxfp4Tensor quantize_mxfp4(const at::Tensor& x, MxScaleMode mode) {
  constexpr const char* kWho = "fp4::quantize_mxfp4";
  const at::Tensor input = checked_input(x, core::kMxfp4Block, "MXFP4", kWho);
  TORCH_CHECK(mode == MxScaleMode::kFloor || mode == MxScaleMode::kRceil, kWho,
              ": unsupported MxScaleMode ", static_cast<int>(mode), " (kFloor or kRceil)");
  const at::TensorOptions options = x.options();
  Mxfp4Tensor out{at::empty(with_last(x.sizes(), 1, 2), options.dtype(kPackedDtype)),
                  at::empty(with_last(x.sizes(), 1, core::kMxfp4Block), options.dtype(at::kByte))};
  if (input.numel() == 0) return out;
  const core::TensorView view = mixprec::detail::to_view(input, kWho);
  mixprec::detail::on_device(x.device(), [&](void* stream) {
    core::quantize_mxfp4_(view, x.size(-1), bytes(out.data), bytes(out.scales), mode, stream);
  });
  return out;
}

at::Tensor dequantize_mxfp4(const Mxfp4Tensor& q, at::ScalarType out_dtype) {
  constexpr const char* kWho = "fp4::dequantize_mxfp4";
  check_out_dtype(out_dtype, kWho);
  const std::vector<std::int64_t> shape = checked_data(q.data, core::kMxfp4Block, "MXFP4", kWho);
  check_scales(q.scales, q.data, at::kByte, core::kMxfp4Block, "scales",
               "E8M0 exponents; view a float8_e8m0fnu tensor as uint8", kWho);
  at::Tensor out = at::empty(shape, q.data.options().dtype(out_dtype));
  if (out.numel() == 0) return out;
  const core::TensorView view = mixprec::detail::to_view(out, kWho);
  const at::Tensor data = q.data.contiguous();
  const at::Tensor scales = q.scales.contiguous();
  mixprec::detail::on_device(out.device(), [&](void* stream) {
    core::dequantize_mxfp4_(bytes(data), bytes(scales), shape.back(), view, stream);
  });
  return out;
}

}  // namespace mixprec::fp4
