// The FP8 references of tests/torch/fp8_test.cpp and fp8_linear_test.cpp, made of PyTorch's own
// ops only (LibTorch >= 2.1): the cast chain every recipe uses around PyTorch's float8 dtypes
// (torchao's to_fp8_saturated, TE's emulation), MXFP8 blocks, and bitwise comparisons.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

namespace fp8_ref {

/// The largest finite value of a float8 dtype.
inline double fp8_max(at::ScalarType dtype) {
  return dtype == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
}

/// PyTorch's chain: x.to(float) * scale, clamped to +-max (PyTorch's own cast does not saturate:
/// past max it gives NaN), cast with PyTorch's rounding.
inline at::Tensor quantize(const at::Tensor& x, const at::Tensor& scale, at::ScalarType dtype) {
  const double m = fp8_max(dtype);
  return x.to(at::kFloat).mul(scale).clamp(-m, m).to(dtype);
}

/// (q.to(float) * scale_inv).to(out).
inline at::Tensor dequantize(const at::Tensor& q, const at::Tensor& scale_inv, at::ScalarType out) {
  return q.to(at::kFloat).mul(scale_inv).to(out);
}

/// A 0-dim float32 tensor.
inline at::Tensor scalar(float v) { return torch::full({}, v, torch::kFloat); }

/// An MXFP8 tensor of the reference: data as the input's shape, E8M0 exponents per block.
struct Mx {
  at::Tensor data, scales;
};

/// The E8M0 exponent of each block amax (float32), written from the OCP MX v1.0 / TE rule
/// "amax / fp8_max rounded up to a power of two" with frexp: v = m * 2^k, m in [0.5, 1), so the
/// smallest power of two >= v is 2^k, or 2^(k-1) when m == 0.5; biased by 127 and kept in
/// [0, 254] (0 is 2^-127, the smallest), 0 for a zero block, 255 (NaN) for inf or NaN.
inline at::Tensor mx_exponents(const at::Tensor& amax, at::ScalarType dtype) {
  const at::Tensor value = amax.mul(static_cast<double>(1.0f / static_cast<float>(fp8_max(dtype))));
  const auto [m, k] = at::frexp(value.to(at::kDouble));
  at::Tensor e = (k.to(at::kLong) - m.eq(0.5).to(at::kLong) + 127).clamp(0, 254);
  e = at::where(value.eq(0), at::zeros_like(e), e);
  return at::where(at::isfinite(amax), e, at::full_like(e, 255));
}

/// 2^(sign * (e - 127)) as float32 for E8M0 bytes (as int64), NaN for 255.
inline at::Tensor e8m0_power(const at::Tensor& e, int sign) {
  const at::Tensor p = at::pow(2.0, (sign * (e - 127)).to(at::kDouble)).to(at::kFloat);
  return at::where(e.eq(255), at::full_like(p, std::numeric_limits<float>::quiet_NaN()), p);
}

/// MXFP8 quantize along the last dim with PyTorch ops: blocks of 32 (the last one of a row
/// zero-padded, which does not change its amax), each element times 2^(127 - e), the chain.
inline Mx quantize_mx(const at::Tensor& x, at::ScalarType dtype) {
  const std::int64_t cols = x.size(-1), blocks = (cols + 31) / 32;
  const at::Tensor rows = x.to(at::kFloat).reshape({-1, cols});
  at::Tensor padded = torch::zeros({rows.size(0), blocks * 32}, torch::kFloat);
  padded.narrow(1, 0, cols).copy_(rows);
  const at::Tensor view = padded.view({rows.size(0), blocks, 32});
  const at::Tensor e = mx_exponents(view.abs().amax(-1), dtype);
  const double m = fp8_max(dtype);
  const at::Tensor q = view.mul(e8m0_power(e, -1).unsqueeze(-1)).clamp(-m, m).to(dtype);
  std::vector<std::int64_t> scale_shape(x.sizes().begin(), x.sizes().end());
  scale_shape.back() = blocks;
  return {q.view({rows.size(0), blocks * 32}).narrow(1, 0, cols).reshape(x.sizes()).contiguous(),
          e.to(at::kByte).reshape(scale_shape)};
}

/// Each element times its block's 2^(e - 127), as float32, then to `out`.
inline at::Tensor dequantize_mx(const Mx& q, at::ScalarType out) {
  const std::int64_t cols = q.data.size(-1);
  const at::Tensor s =
      e8m0_power(q.scales.to(at::kLong), 1).repeat_interleave(32, -1).narrow(-1, 0, cols);
  return q.data.to(at::kFloat).mul(s).to(out);
}

/// A tile-scaled tensor of the reference: data as the input's shape, float32 scale_inv per tile.
struct Tiled {
  at::Tensor data, scale_inv;
};

/// Tile quantize with PyTorch ops, tile by tile of th x tc over x's rows (2-D x, ragged edges):
/// the tile's amax, TE's compute_scale_from_amax in float32 ops (amax below eps counts as eps; 0
/// gives 1; fp8_max / amax; the mantissa cleared for power-of-two scales), then the chain.
inline Tiled quantize_tiles(const at::Tensor& x, std::int64_t th, std::int64_t tc,
                            at::ScalarType dtype, bool pow2, double eps) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  Tiled out{at::empty(x.sizes(), x.options().dtype(dtype)),
            at::empty({(rows + th - 1) / th, (cols + tc - 1) / tc}, x.options().dtype(at::kFloat))};
  for (std::int64_t i = 0; i * th < rows; ++i) {
    for (std::int64_t j = 0; j * tc < cols; ++j) {
      const at::Tensor tile = x.narrow(0, i * th, std::min(th, rows - i * th))
                                  .narrow(1, j * tc, std::min(tc, cols - j * tc));
      at::Tensor amax = tile.abs().max().to(at::kFloat).clamp_min(eps);
      at::Tensor scale = at::where(amax.eq(0), at::ones_like(amax),
                                   torch::full({}, static_cast<float>(fp8_max(dtype))) / amax);
      scale = at::where(scale.isinf(), torch::full({}, FLT_MAX), scale);
      if (pow2) {
        scale = scale.view(at::kInt).bitwise_and(static_cast<int>(0xff800000u)).view(at::kFloat);
      }
      out.scale_inv[i][j] = 1.0f / scale;
      out.data.narrow(0, i * th, tile.size(0))
          .narrow(1, j * tc, tile.size(1))
          .copy_(quantize(tile, scale, dtype));
    }
  }
  return out;
}

/// Each element times its tile's scale_inv, as float32, then to `out`.
inline at::Tensor dequantize_tiles(const Tiled& q, std::int64_t th, std::int64_t tc,
                                   at::ScalarType out) {
  const at::Tensor inv = q.scale_inv.repeat_interleave(th, 0).repeat_interleave(tc, 1);
  return (q.data.to(at::kFloat) * inv.narrow(0, 0, q.data.size(0)).narrow(1, 0, q.data.size(1)))
      .to(out);
}

/// The bits of `t` as an integer tensor of its element size.
inline at::Tensor bits(const at::Tensor& t) {
  switch (t.element_size()) {
    case 1:
      return t.contiguous().view(at::kByte).to(at::kInt);
    case 2:
      return t.contiguous().view(at::kShort).to(at::kInt);
    case 4:
      return t.contiguous().view(at::kInt).to(at::kLong);
    default:
      return t.contiguous().view(at::kLong);
  }
}

/// Whether a and b have the same shape and dtype and equal bits everywhere; with nan_any_bits,
/// positions where both are NaN count as equal whatever their bits (sign, payload).
inline ::testing::AssertionResult bitwise_equal(const at::Tensor& a, const at::Tensor& b,
                                                bool nan_any_bits = false) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
    return ::testing::AssertionFailure() << "shape/dtype " << a.sizes() << " " << a.scalar_type()
                                         << " vs " << b.sizes() << " " << b.scalar_type();
  }
  at::Tensor same = bits(a).eq(bits(b));
  if (nan_any_bits && at::isFloatingType(a.scalar_type())) {
    same = same.logical_or(at::isnan(a.to(at::kFloat)).logical_and(at::isnan(b.to(at::kFloat))));
  }
  if (same.all().item<bool>()) return ::testing::AssertionSuccess();
  const at::Tensor bad = same.logical_not().flatten().nonzero();
  const std::int64_t i = bad[0][0].item<std::int64_t>();
  std::ostringstream out;
  out << bad.size(0) << " of " << a.numel() << " elements differ; first at flat index " << i
      << ": bits " << bits(a).flatten()[i].item<std::int64_t>() << " vs "
      << bits(b).flatten()[i].item<std::int64_t>() << " (values "
      << a.flatten()[i].to(at::kDouble).item<double>() << " vs "
      << b.flatten()[i].to(at::kDouble).item<double>() << ")";
  return ::testing::AssertionFailure() << out.str();
}

}  // namespace fp8_ref
