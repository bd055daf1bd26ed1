// The demo's MLP on mixprec::fp8::Linear, and the recount of what its FP8 gradient casts flushed.
#include "fp8_model.h"

#if MIXPREC_TORCH_FP8

#include <cmath>
#include <string>

namespace mixprec_demo {

Fp8MlpImpl::Fp8MlpImpl(MlpImpl& source, double output_scale, std::int64_t amax_history_len,
                       bool fp4)
    : output_scale_(output_scale), fp4_(fp4) {
  torch::NoGradGuard no_grad;
  const auto from = source.named_parameters();
  for (int i = 0; i <= MlpImpl::kHiddenLayers; ++i) {
    const std::string name = "linear" + std::to_string(i);
    const torch::Tensor& w = from[name + ".weight"];
    auto layer = register_module(
        name,
        mixprec::fp8::Linear(
            mixprec::fp8::LinearOptions(w.size(1), w.size(0)).amax_history_len(amax_history_len)));
    layer->to(w.device());
    layer->weight.copy_(w);
    layer->bias.copy_(from[name + ".bias"]);
    layers_.push_back(layer);
  }
  grad_outputs_.resize(layers_.size());
}

torch::Tensor Fp8MlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = x;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    // 4-bit runs: the first and last layers in fp32 (plain linear: no cast), see the constructor.
    const bool high_precision = fp4_ && (i == 0 || i + 1 == layers_.size());
    h = high_precision ? torch::linear(h, layers_[i]->weight, layers_[i]->bias)
                       : layers_[i]->forward(h);
    if (h.requires_grad()) {
      torch::Tensor* slot = &grad_outputs_[i];
      h.register_hook([slot](const torch::Tensor& g) { *slot = g; });
    }
    if (i + 1 < layers_.size()) h = torch::tanh(h);
  }
  return (h * output_scale_).to(torch::kFloat);
}

void Fp8MlpImpl::count_flushed(const mixprec::fp8::Recipe& recipe, FlushCounter* counter,
                               double* scale_min, double* scale_max) {
  namespace fp8 = mixprec::fp8;
  torch::NoGradGuard no_grad;
  const fp8::RecipeOptions& o = recipe.options();
  const bool mx = o.scaling() == fp8::Scaling::kMxfp8;
  const bool nvfp4 = o.scaling() == fp8::Scaling::kNvfp4;
  const bool mxfp4 = o.scaling() == fp8::Scaling::kMxfp4;
  const bool tiled =
      o.scaling() == fp8::Scaling::kRowwise || o.scaling() == fp8::Scaling::kBlockwise;
  const at::ScalarType grad_dtype = !mx && !tiled && o.format() == fp8::Format::kHybrid
                                        ? at::kFloat8_e5m2
                                        : at::kFloat8_e4m3fn;  // MXFP8, tiles: E4M3 always
  *scale_min = *scale_max = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const torch::Tensor g = grad_outputs_[i];
    grad_outputs_[i] = torch::Tensor();
    if (!g.defined()) continue;
    torch::Tensor back;  // the FP8 grad_output as the layer's GEMMs read it
    double lo = 1;
    double hi = 1;
    if (nvfp4 || mxfp4) {
      if (i == 0 || i + 1 == layers_.size()) continue;  // fp32 layers: nothing cast
      // The weight gradient's cast: blocks along the batch (fp8_linear.cpp), rounded to nearest.
      const torch::Tensor gt = g.t().contiguous();
      if (nvfp4) {
        back = mixprec::fp4::dequantize_nvfp4(mixprec::fp4::quantize_nvfp4(gt), torch::kFloat).t();
      } else {
        const mixprec::fp4::Mxfp4Tensor q = mixprec::fp4::quantize_mxfp4(gt, o.mx_scale_mode());
        back = mixprec::fp4::dequantize_mxfp4(q, torch::kFloat).t();
      }
    } else if (tiled) {
      // The weight gradient's cast, as fp8_linear.cpp makes it: g^T's rows (rowwise: one scale
      // per row, torchao's; blockwise: tiles of 1 x 128, TE's), power-of-two scales.
      const torch::Tensor gt = g.t().contiguous();
      const bool rowwise = o.scaling() == fp8::Scaling::kRowwise;
      const fp8::TiledTensor q = fp8::quantize_tiled(
          gt, 1, rowwise ? gt.size(1) : 128, at::kFloat8_e4m3fn, true, rowwise ? o.eps() : 0.0);
      back = q.data.to(torch::kFloat).t();
      // 1 / scale_inv: the scales; an all-zero row or tile has scale 1 and says nothing.
      const torch::Tensor scales = q.scale_inv.reciprocal().flatten();
      const torch::Tensor used = scales.masked_select(scales != 1);
      if (used.numel() > 0) {
        lo = used.min().item<double>();
        hi = used.max().item<double>();
      }
    } else if (mx) {
      // The weight gradient's cast (every layer has one; linear0 has no grad_input GEMM): blocks
      // of 32 along the batch, the GEMM's reduction dimension (fp8_linear.cpp, as TE).
      const fp8::MxTensor q = fp8::quantize_mxfp8(g.t(), at::kFloat8_e4m3fn);
      back = q.data.to(torch::kFloat).t();
      // Each block's elements were multiplied by 2^(127 - e) before the cast; an all-zero
      // block has e = 0 and says nothing, so only the others count.
      const torch::Tensor e = q.scales.to(torch::kInt).flatten();
      const torch::Tensor used = e.masked_select((e > 0) & (e < 255));
      if (used.numel() > 0) {
        lo = std::ldexp(1.0, 127 - used.max().item<int>());
        hi = std::ldexp(1.0, 127 - used.min().item<int>());
      }
    } else {
      // kNone casts with scale 1; delayed and current leave the scale they used in the layer's
      // buffer (column 2: grad_output), the delayed one set before this forward by update().
      const torch::Tensor scale = o.scaling() == fp8::Scaling::kNone
                                      ? torch::ones({1}, g.options().dtype(torch::kFloat))
                                      : layers_[i]->scale.slice(0, 2, 3);
      back = fp8::quantize(g, scale, grad_dtype).to(torch::kFloat);
      lo = hi = scale.item<double>();
    }
    if (i == 0) {
      *scale_min = lo;
      *scale_max = hi;
    }
    const torch::Tensor nonzero = g != 0;
    counter->nonzero += nonzero.sum().item<std::int64_t>();
    counter->flushed += (nonzero & (back == 0)).sum().item<std::int64_t>();
  }
}

}  // namespace mixprec_demo

#endif  // MIXPREC_TORCH_FP8
