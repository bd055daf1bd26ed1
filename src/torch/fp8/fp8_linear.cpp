// fp8::Linear (include/mixprec/fp8.h): torch::nn::Linear, whose forward inside an fp8::Autocast
// scope casts its input and weight to FP8 (and its backward grad_output), each with the scale the
// recipe chooses, through an autograd function. The GEMMs are at::_scaled_mm where LibTorch has it
// for the device (CUDA from 2.5, the CPU from 2.14), else FP8 values dequantized and multiplied in
// the input's dtype.
#include <ATen/ATen.h>
#include <ATen/Config.h>
#include <torch/autograd.h>
#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include "mixprec/fp8.h"
#include "torch/fp8/fp4_detail.h"
#include "torch/fp8/fp8_state.h"

#if defined(MIXPREC_TORCH_CUDA) && MIXPREC_TORCH_AT_LEAST(2, 5)
// LibTorch 2.5 has at::_scaled_mm returning one tensor (pytorch/pytorch#128683 dropped its amax
// output); older LibTorch takes the dequantizing path.
#include <ATen/cuda/CUDAContext.h>
#define MIXPREC_FP8_SCALED_MM 1
#else
#define MIXPREC_FP8_SCALED_MM 0
#endif
// LibTorch 2.14 has a CPU kernel for at::_scaled_mm (any sizes and layouts, E4M3 and E5M2).
#define MIXPREC_FP8_SCALED_MM_CPU MIXPREC_TORCH_AT_LEAST(2, 14)
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#define MIXPREC_X86_CPUID 1
#else
#define MIXPREC_X86_CPUID 0
#endif

namespace mixprec::fp8 {
namespace detail {

bool cpu_scaled_mm_is_onednn_reference(at::ScalarType a, at::ScalarType b) {
#if MIXPREC_FP8_SCALED_MM_CPU && AT_MKLDNN_ENABLED() && MIXPREC_X86_CPUID
  // CPUID leaf 7: subleaf 0 EDX bit 25 is AMX-INT8, subleaf 1 EAX bit 21 AMX-FP16 (Intel SDM).
  static const bool amx_int8_without_fp16 = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool int8 = (edx >> 25) & 1u;
    const unsigned subleaves = eax;
    bool fp16 = false;
    if (subleaves >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) fp16 = (eax >> 21) & 1u;
    return int8 && !fp16;
  }();
  return a == b && amx_int8_without_fp16 && at::globalContext().userEnabledMkldnn();
#else
  (void)a, (void)b;
  return false;
#endif
}

}  // namespace detail
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kInput = 0;  // amax_history / scale columns (TE's order)
constexpr int kWeight = 1;
constexpr int kGradOutput = 2;

/// What one forward under a recipe needs again in its backward (kept in the autograd context).
struct Plan : torch::CustomClassHolder {
  std::shared_ptr<detail::RecipeState> state;
  Scaling scaling = Scaling::kDelayed;
  NanAmax nan_amax = NanAmax::kIgnore;
  bool power_of_2 = false;  // rowwise, blockwise
  double eps = 0.0;         // rowwise (blockwise: TE's amax_epsilon, 0)
  core::Fp8Format grad_format = core::Fp8Format::kE4M3;
  fp4::MxScaleMode mx_mode = fp4::MxScaleMode::kFloor;     // MXFP4
  bool rht = true, stochastic = true, two_d = true;        // NVFP4 (TE's disable_* options)
  std::uint64_t seed = 0;                                  // NVFP4 stochastic rounding
  at::Tensor amax_history, scale, scale_inv;  // the module's buffers
  at::ScalarType compute_dtype = at::kFloat;  // the input's dtype
  at::ScalarType weight_dtype = at::kFloat, bias_dtype = at::kFloat;
  bool has_bias = false, input_grad = false, weight_grad = false;
};

/// A tensor cast to FP8 with one scale, and the scale_inv that dequantizes it.
struct Cast {
  at::Tensor q;
  at::Tensor scale_inv;
};

/// Casts x (input, weight or grad_output: `column`) with the plan's per-tensor rule.
Cast cast(const Plan& plan, const at::Tensor& x, int column, core::Fp8Format format) {
  const at::ScalarType dtype = detail::to_dtype(format);
  switch (plan.scaling) {
    case Scaling::kDelayed: {
      // The scale of the last update; this cast's amax goes to slot 0 (max with earlier casts of
      // the iteration), and the tensor to the recipe's next update.
      at::Tensor q = quantize_and_record_amax(x, plan.scale[column], dtype,
                                              plan.amax_history[0][column], plan.nan_amax);
      plan.state->record({plan.amax_history, plan.scale, plan.scale_inv, column, format});
      // A copy: an update before backward must not change how the saved q is read.
      return {std::move(q), plan.scale_inv[column].clone()};
    }
    case Scaling::kCurrent: {
      at::Tensor q = detail::quantize_current(x, dtype, detail::current_rule(plan.state->options),
                                              plan.scale[column], plan.scale_inv[column]);
      return {std::move(q), plan.scale_inv[column].clone()};
    }
    case Scaling::kNone: {
      at::Tensor one = at::ones({}, x.options().dtype(at::kFloat));
      return {quantize(x, one, dtype), one};
    }
    case Scaling::kMxfp8:
    case Scaling::kRowwise:
    case Scaling::kBlockwise:
    case Scaling::kNvfp4:
    case Scaling::kMxfp4:
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "fp8::Linear: no per-tensor cast for a block-scaled recipe");
  return {};
}

/// Whether at::_scaled_mm takes op(a) [M, K] @ op(b) [K, N] here: a LibTorch that has it for the
/// device (the CPU from LibTorch 2.14; CUDA from 2.5, sm_89+, every dimension a multiple of 16),
/// an output dtype it writes, and not two E5M2 operands.
bool scaled_mm_fits(const at::Tensor& a, const at::Tensor& b, std::int64_t m, std::int64_t k,
                    std::int64_t n, at::ScalarType out) {
  if (out != at::kFloat && out != at::kHalf && out != at::kBFloat16) return false;
  if (a.scalar_type() == at::kFloat8_e5m2 && b.scalar_type() == at::kFloat8_e5m2) return false;
  if (a.is_cpu()) return MIXPREC_FP8_SCALED_MM_CPU;
#if MIXPREC_FP8_SCALED_MM
  if (!a.is_cuda()) return false;
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(a.device().index());
  if (props->major * 10 + props->minor < 89) return false;
  return m % 16 == 0 && k % 16 == 0 && n % 16 == 0;
#else
  (void)m, (void)k, (void)n;
  return false;
#endif
}

#if MIXPREC_FP8_SCALED_MM_CPU
/// at::_scaled_mm(mat1, mat2, ...) on the CPU as LibTorch computes it without oneDNN, from
/// contiguous [M, K] and [K, N] operands (_scaled_mm makes them so): each converted to fp32 and
/// multiplied by its scale, one fp32 matmul, the result converted to `out`. Bit for bit _scaled_mm with oneDNN disabled
/// (tests/torch/fp8_linear_test.cpp), where oneDNN's is a reference kernel, 160 to 2500 times
/// slower on a 2-vCPU Xeon (docs/fp8.md, "What runs where").
at::Tensor cpu_scaled_mm_without_onednn(const at::Tensor& mat1, const at::Tensor& mat2,
                                        const at::Tensor& scale_a, const at::Tensor& scale_b,
                                        at::ScalarType out) {
  const at::Tensor a = at::mul(mat1.to(at::kFloat), scale_a.item<float>());
  const at::Tensor b = at::mul(mat2.to(at::kFloat), scale_b.item<float>());
  return at::matmul(a, b).to(out);
}
#endif

/// op(a) @ op(b), op a transpose when ta / tb, in `out` dtype. The fallback dequantizes each
/// operand as stored and multiplies the (transposed) views: tests/torch/fp8_linear_test.cpp
/// builds the same from PyTorch ops.
at::Tensor fp8_mm(const Cast& a, bool ta, const Cast& b, bool tb, at::ScalarType out) {
  const std::int64_t m = a.q.size(ta ? 1 : 0), k = a.q.size(ta ? 0 : 1);
  const std::int64_t n = b.q.size(tb ? 0 : 1);
  if (scaled_mm_fits(a.q, b.q, m, k, n, out)) {
#if MIXPREC_FP8_SCALED_MM || MIXPREC_FP8_SCALED_MM_CPU
    // _scaled_mm wants mat1 row-major and mat2 column-major (cuBLASLt's FP8 "TN" layout; the CPU
    // kernel takes it too).
    const at::Tensor mat1 = ta ? a.q.t().contiguous() : a.q.contiguous();
#if MIXPREC_FP8_SCALED_MM_CPU
    if (mat1.is_cpu() &&
        detail::cpu_scaled_mm_is_onednn_reference(a.q.scalar_type(), b.q.scalar_type())) {
      const at::Tensor mat2 = (tb ? b.q.t() : b.q).contiguous();  // row-major [K, N]
      return cpu_scaled_mm_without_onednn(mat1, mat2, a.scale_inv, b.scale_inv, out);
    }
#endif
    const at::Tensor mat2 = (tb ? b.q.contiguous() : b.q.t().contiguous()).t();
    return at::_scaled_mm(mat1, mat2, a.scale_inv, b.scale_inv, std::nullopt, std::nullopt, out);
#endif
  }
  const at::Tensor da = dequantize(a.q, a.scale_inv, out);
  const at::Tensor db = dequantize(b.q, b.scale_inv, out);
  return (ta ? da.t() : da).mm(tb ? db.t() : db);
}

bool block_scaled(Scaling s) {
  return s == Scaling::kMxfp8 || s == Scaling::kRowwise || s == Scaling::kBlockwise ||
         s == Scaling::kNvfp4 || s == Scaling::kMxfp4;
}

/// A GEMM operand cast with scales per block along its last dimension, the GEMM's reduction
/// dimension: MXFP8 blocks of 32 (E8M0 scales), rows (rowwise: one float32 scale_inv per row),
/// TE's tiles (blockwise: 1 x 128 for activations and gradients, 128 x 128 for weights), or the
/// 4-bit formats (NVFP4: E4M3 block scales and the per-tensor amax; MXFP4: E8M0 block scales).
struct BlockCast {
  at::Tensor data, scales;
  std::int64_t tile_rows = 1, tile_cols = 1;
  at::Tensor amax = {};  // NVFP4's per-tensor amax
};

/// Which operand a cast is of, for the NVFP4 recipe's choices (TE's quantization.py).
enum class Role { kActivation, kWeight, kGradient };

// Note [The NVFP4 recipe's casts]
// As TE's NVFP4BlockScaling: activations and gradients in 1x16 blocks, weights in 16x16 tiles
// (one scale for both directions, so the weight's transposed copy has the same codes), gradients
// stochastically rounded. The weight-gradient GEMM, grad^T @ x reduced over the batch, reads both
// operands' columnwise copies through the random Hadamard transform along the batch: (g H)(x H)^T
// = g x^T as H H^T = I, so the product needs no inverse transform, and the transform spreads an
// outlier over 16 elements before the 4-bit cast. Every copy is cast from the high-precision
// tensor (TE's reference_nvfp4.py), never from another cast.
BlockCast fp4_cast(const Plan& plan, const at::Tensor& t, Role role, bool columnwise) {
  if (plan.scaling == Scaling::kMxfp4) {
    fp4::Mxfp4Tensor m = fp4::quantize_mxfp4(t, plan.mx_mode);
    return {std::move(m.data), std::move(m.scales)};
  }
  core::Nvfp4Options rule;
  rule.two_d = role == Role::kWeight && plan.two_d;
  rule.stochastic = role == Role::kGradient && plan.stochastic;
  if (rule.stochastic) {
    rule.seed = plan.seed;
    rule.offset = plan.state->next_offset();
  }
  const bool rht = columnwise && role != Role::kWeight && plan.rht;
  // With an amax reduction set, every cast's per-tensor amax is the max over the ranks (one
  // all-reduce of one float a cast): the ranks' scales agree, as TE's amax_reduction_group.
  fp4::Nvfp4Tensor n = fp4::detail::quantize_nvfp4(rht ? fp4::detail::hadamard16(t) : t, rule,
                                                   plan.state->reduction());
  return {std::move(n.data), std::move(n.block_scales), 1, 1, std::move(n.amax)};
}

/// The tiles of a rowwise or blockwise operand with `cols` columns.
std::pair<std::int64_t, std::int64_t> tiles_of(const Plan& plan, std::int64_t cols, bool weight) {
  if (plan.scaling == Scaling::kRowwise) return {1, std::max<std::int64_t>(cols, 1)};
  return {weight ? 128 : 1, 128};
}

BlockCast block_cast(const Plan& plan, const at::Tensor& t, Role role, bool columnwise = false) {
  const bool weight = role == Role::kWeight;
  if (plan.scaling == Scaling::kNvfp4 || plan.scaling == Scaling::kMxfp4) {
    return fp4_cast(plan, t, role, columnwise);
  }
  if (plan.scaling == Scaling::kMxfp8) {
    MxTensor m = quantize_mxfp8(t, at::kFloat8_e4m3fn, plan.nan_amax);
    return {std::move(m.data), std::move(m.scales)};
  }
  const auto [rows, cols] = tiles_of(plan, t.size(-1), weight);
  TiledTensor c =
      quantize_tiled(t, rows, cols, at::kFloat8_e4m3fn, plan.power_of_2, plan.eps, plan.nan_amax);
  return {std::move(c.data), std::move(c.scale_inv), rows, cols};
}

/// A cast saved in forward (its data and scales), with its tiles.
BlockCast saved_cast(const Plan& plan, const at::Tensor& data, const at::Tensor& scales,
                     const at::Tensor& amax, bool weight) {
  if (plan.scaling == Scaling::kMxfp8 || plan.scaling == Scaling::kMxfp4) return {data, scales};
  if (plan.scaling == Scaling::kNvfp4) return {data, scales, 1, 1, amax};
  const auto [rows, cols] = tiles_of(plan, data.size(-1), weight);
  return {data, scales, rows, cols};
}

at::Tensor block_dequantize(const Plan& plan, const BlockCast& c, at::ScalarType dtype) {
  if (plan.scaling == Scaling::kMxfp8) return dequantize_mxfp8({c.data, c.scales}, dtype);
  if (plan.scaling == Scaling::kNvfp4) return fp4::dequantize_nvfp4({c.data, c.scales, c.amax}, dtype);
  if (plan.scaling == Scaling::kMxfp4) return fp4::dequantize_mxfp4({c.data, c.scales}, dtype);
  return dequantize_tiled({c.data, c.scales, c.tile_rows, c.tile_cols}, dtype);
}

/// The autograd function of fp8::Linear under a recipe, on 2-D [M, in] inputs.
struct LinearFunction : torch::autograd::Function<LinearFunction> {
  // bias is optional: Function::apply refuses an undefined tensor (LibTorch 2.6:
  // "tensor does not have a device"), and takes a std::nullopt as a non-tensor argument.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias,
                            const c10::intrusive_ptr<Plan>& plan) {
    const at::ScalarType dtype = plan->compute_dtype;
    const at::Tensor bias_c = bias.has_value() ? bias->to(dtype) : at::Tensor();
    at::Tensor y;
    if (block_scaled(plan->scaling)) {
      // Blocks along the reduction dim of each GEMM (TE's rowwise / columnwise copies):
      // forward reduces over in_features; backward's grad_input over out_features (weight^T
      // blocks) and grad_weight over the batch (input^T blocks), saved only when needed.
      const BlockCast xr = block_cast(*plan, x, Role::kActivation);
      const BlockCast wr = block_cast(*plan, weight, Role::kWeight);
      y = at::linear(block_dequantize(*plan, xr, dtype), block_dequantize(*plan, wr, dtype),
                     bias_c);
      BlockCast xc, wc;
      if (plan->weight_grad) xc = block_cast(*plan, x.t(), Role::kActivation, true);
      if (plan->input_grad) wc = block_cast(*plan, weight.t(), Role::kWeight, true);
      ctx->save_for_backward({xc.data, xc.scales, wc.data, wc.scales, xc.amax, wc.amax});
    } else {
      const Cast cx = cast(*plan, x, kInput, core::Fp8Format::kE4M3);
      const Cast cw = cast(*plan, weight, kWeight, core::Fp8Format::kE4M3);
      if (scaled_mm_fits(cx.q, cw.q, x.size(0), x.size(1), weight.size(0), dtype)) {
        y = fp8_mm(cx, false, cw, true, dtype);
        if (bias_c.defined()) y.add_(bias_c);
      } else {
        // The fallback: at::linear (its bias fused into the GEMM, as torch::nn::Linear's).
        y = at::linear(dequantize(cx.q, cx.scale_inv, dtype), dequantize(cw.q, cw.scale_inv, dtype),
                       bias_c);
      }
      ctx->save_for_backward({cx.q, cx.scale_inv, cw.q, cw.scale_inv});
    }
    ctx->saved_data["plan"] = c10::IValue::make_capsule(c10::intrusive_ptr<Plan>(plan));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto plan = c10::static_intrusive_pointer_cast<Plan>(ctx->saved_data["plan"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const at::ScalarType dtype = plan->compute_dtype;
    const at::Tensor& grad = grads[0];
    at::Tensor grad_input, grad_weight, grad_bias;
    if (plan->has_bias && ctx->needs_input_grad(2)) {
      // In high precision from the unquantized gradient (TE's bgrad); fp16/bf16 summed in fp32.
      const bool narrow = grad.scalar_type() == at::kHalf || grad.scalar_type() == at::kBFloat16;
      grad_bias = grad.sum(/*dim=*/{0}, /*keepdim=*/false, narrow ? at::kFloat : grad.scalar_type())
                      .to(plan->bias_dtype);
    }
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    if (block_scaled(plan->scaling)) {
      if (need_x) {
        const at::Tensor g =
            block_dequantize(*plan, block_cast(*plan, grad, Role::kGradient), dtype);
        grad_input = g.mm(
            block_dequantize(*plan, saved_cast(*plan, saved[2], saved[3], saved[5], true), dtype)
                .t());
      }
      if (need_w) {
        const at::Tensor gt =
            block_dequantize(*plan, block_cast(*plan, grad.t(), Role::kGradient, true), dtype);
        grad_weight = gt.mm(
            block_dequantize(*plan, saved_cast(*plan, saved[0], saved[1], saved[4], false), dtype)
                .t());
      }
    } else if (need_x || need_w) {
      const Cast cg = cast(*plan, grad, kGradOutput, plan->grad_format);
      if (need_x) grad_input = fp8_mm(cg, false, {saved[2], saved[3]}, false, dtype);
      if (need_w) grad_weight = fp8_mm(cg, true, {saved[0], saved[1]}, false, dtype);
    }
    if (grad_weight.defined()) grad_weight = grad_weight.to(plan->weight_dtype);
    return {grad_input, grad_weight, grad_bias, at::Tensor()};
  }
};

}  // namespace

LinearOptions::LinearOptions(std::int64_t in_features, std::int64_t out_features)
    : in_features_(in_features), out_features_(out_features) {}

LinearImpl::LinearImpl(const LinearOptions& options_) : options(options_) { reset(); }

void LinearImpl::reset() {
  // torch::nn::LinearImpl::reset, with the FP8 state beside it.
  weight =
      register_parameter("weight", torch::empty({options.out_features(), options.in_features()}));
  if (options.bias()) {
    bias = register_parameter("bias", torch::empty(options.out_features()));
  } else {
    bias = register_parameter("bias", {}, /*requires_grad=*/false);
  }
  TORCH_CHECK(options.amax_history_len() >= 1, "fp8::Linear: amax_history_len must be >= 1, got ",
              options.amax_history_len());
  amax_history = register_buffer("amax_history", torch::zeros({options.amax_history_len(), 3}));
  scale = register_buffer("scale", torch::ones({3}));
  scale_inv = register_buffer("scale_inv", torch::ones({3}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  // torch::nn::LinearImpl::reset_parameters (LibTorch 2.x), so equal seeds give equal weights.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5));
  if (bias.defined()) {
    const auto [fan_in, fan_out] = torch::nn::init::_calculate_fan_in_and_fan_out(weight);
    const double bound = 1 / std::sqrt(fan_in);
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

namespace {
// Runs convert (a Module::to), then puts back the FP8 state's float32 values, moved to wherever
// the conversion put the parameters.
template <typename Convert>
void keeping_fp8_state(LinearImpl& m, const Convert& convert) {
  const at::Tensor history = m.amax_history.detach().clone(), scale = m.scale.detach().clone(),
                   scale_inv = m.scale_inv.detach().clone();
  convert();
  const c10::Device device = m.weight.device();
  m.amax_history.set_data(history.to(device));
  m.scale.set_data(scale.to(device));
  m.scale_inv.set_data(scale_inv.to(device));
}
}  // namespace

void LinearImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  keeping_fp8_state(*this, [&] { torch::nn::Module::to(device, dtype, non_blocking); });
}

void LinearImpl::to(torch::Dtype dtype, bool non_blocking) {
  keeping_fp8_state(*this, [&] { torch::nn::Module::to(dtype, non_blocking); });
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << "mixprec::fp8::Linear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << std::boolalpha
         << options.bias() << ")";
}

at::Tensor LinearImpl::forward(const at::Tensor& input) {
  Recipe* recipe = Autocast::current();
  if (recipe == nullptr) return at::linear(input, weight, bias);
  constexpr const char* kWho = "fp8::Linear";
  const std::int64_t in = options.in_features(), out = options.out_features();
  TORCH_CHECK(input.defined() && input.dim() >= 1, kWho,
              ": expected an input of at least one dimension [..., ", in, "]");
  TORCH_CHECK(input.size(-1) == in, "mat1 and mat2 shapes cannot be multiplied (",
              input.numel() / std::max<std::int64_t>(in, 1), "x", input.size(-1), " and ", in, "x",
              out, ") (", kWho, " with in_features=", in, ")");
  TORCH_CHECK(input.device() == weight.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              input.device(), " and ", weight.device(), "! (", kWho, ": input and weight)");
  const RecipeOptions& opts = recipe->options();
  if (opts.scaling() == Scaling::kDelayed) {
    TORCH_CHECK(amax_history.size(0) == opts.amax_history_len(), kWho, ": its amax_history has ",
                amax_history.size(0), " rows but the recipe's amax_history_len is ",
                opts.amax_history_len(),
                "; give both the same length (LinearOptions::amax_history_len, "
                "RecipeOptions::amax_history_len)");
  }
  TORCH_CHECK(amax_history.dim() == 2 && amax_history.size(1) == 3 &&
                  amax_history.is_contiguous() && amax_history.scalar_type() == at::kFloat &&
                  scale.sizes() == at::IntArrayRef{3} && scale.is_contiguous() &&
                  scale.scalar_type() == at::kFloat && scale_inv.sizes() == at::IntArrayRef{3} &&
                  scale_inv.is_contiguous() && scale_inv.scalar_type() == at::kFloat,
              kWho,
              ": expected contiguous float32 buffers amax_history [L, 3], scale [3] and "
              "scale_inv [3], got ",
              amax_history.sizes(), ", ", scale.sizes(), " and ", scale_inv.sizes());
  TORCH_CHECK(amax_history.device() == input.device() && scale.device() == input.device() &&
                  scale_inv.device() == input.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              input.device(), " and ", amax_history.device(), "! (", kWho, ": its buffers)");

  auto plan = c10::make_intrusive<Plan>();
  plan->state = recipe->state();
  plan->scaling = opts.scaling();
  plan->nan_amax = opts.nan_amax();
  plan->power_of_2 = detail::power_of_2(opts);
  plan->eps = opts.scaling() == Scaling::kRowwise ? opts.eps() : 0.0;
  plan->grad_format = detail::grad_format(opts);
  plan->mx_mode = opts.mx_scale_mode();
  plan->rht = !opts.disable_rht();
  plan->stochastic = !opts.disable_stochastic_rounding();
  plan->two_d = !opts.disable_2d_quantization();
  plan->seed = opts.seed();
  plan->amax_history = amax_history;
  plan->scale = scale;
  plan->scale_inv = scale_inv;
  plan->compute_dtype = input.scalar_type();
  plan->weight_dtype = weight.scalar_type();
  plan->has_bias = bias.defined();
  if (plan->has_bias) plan->bias_dtype = bias.scalar_type();
  const bool grad = at::GradMode::is_enabled();
  plan->input_grad = grad && input.requires_grad();
  plan->weight_grad = grad && weight.requires_grad();

  std::vector<std::int64_t> out_shape(input.sizes().begin(), input.sizes().end());
  out_shape.back() = out;
  const at::Tensor x = input.reshape({-1, in});
  const std::optional<at::Tensor> optional_bias =
      bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  // GCC 14 warns (-Warray-bounds, -Wstringop-overflow) in the vector<bool>::reserve that
  // LibTorch 2.6's Function::apply inlines here: GCC's false positive, kept out of the build log.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
  at::Tensor y = LinearFunction::apply(x, weight, optional_bias, plan);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  return y.view(out_shape);
}

}  // namespace mixprec::fp8
