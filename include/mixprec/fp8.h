// mixprec::fp8: FP8 training on LibTorch (>= 2.1, which has float8 dtypes). What GradScaler's one
// loss scale did for fp16, FP8 needs per tensor (or per block, row or tile): a scale from the
// tensor's absolute maximum (amax). This header has the functional ops (the fixed API of api.md),
// the recipes (delayed, current, MXFP8, rowwise, blockwise), the scope guard that turns FP8 on,
// and fp8::Linear, a drop-in for torch::nn::Linear. The kernels and the scale rules are the core's (mixprec/core/fp8.h);
// docs/fp8.md has the formulas, their sources and what runs where.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "mixprec/fp4.h"
#include "mixprec/torch_version.h"

#if !MIXPREC_TORCH_FP8
#error "mixprec/fp8.h needs LibTorch >= 2.1 (float8 dtypes); this LibTorch has none, and mixprec \
was built without its FP8 LibTorch part (its core FP8 kernels, mixprec/core/fp8.h, still work)."
#endif

namespace mixprec::fp8 {

// ---- Functional ops (api.md) ----------------------------------------------------------------

/// How an amax treats NaN elements (core::NanAmax): the recipes' recording and reduction choose,
/// the functional amax() always propagates.
enum class NanAmax {
  kIgnore,     ///< Transformer Engine's kernels (fmaxf): NaN elements are skipped
  kPropagate,  ///< torchao, x.abs().max(): a NaN element makes the amax NaN
};

/// max |x| over all elements, as a 1-element float32 tensor on x's device (NaN if any element is
/// NaN; 0 for an empty x). x: float32, float64, float16 or bfloat16, any strides.
at::Tensor amax(const at::Tensor& x);

/// q = saturate(x * scale) rounded to nearest even into fp8_dtype (at::kFloat8_e4m3fn or
/// at::kFloat8_e5m2), of x's shape; scale: 1-element float32 on x's device. Bit for bit
/// x.to(kFloat).mul(scale).clamp(-max, max).to(fp8_dtype): inf saturates to +-max, NaN stays NaN.
at::Tensor quantize(const at::Tensor& x, const at::Tensor& scale, at::ScalarType fp8_dtype);

/// x' = (q.to(kFloat) * scale_inv).to(out_dtype); scale_inv: 1-element float32 on q's device.
at::Tensor dequantize(const at::Tensor& q, const at::Tensor& scale_inv, at::ScalarType out_dtype);

/// quantize(), also recording amax(x) into `amax_slot` (a 1-element float32 view on x's device)
/// as amax_slot = max(amax_slot, amax(x)), in the same pass over x: delayed scaling's cast. With
/// NanAmax::kIgnore, NaN elements of x are left out of the amax (a NaN slot stays NaN).
at::Tensor quantize_and_record_amax(const at::Tensor& x, const at::Tensor& scale,
                                    at::ScalarType fp8_dtype, const at::Tensor& amax_slot,
                                    NanAmax nan = NanAmax::kPropagate);

/// An MXFP8 tensor: FP8 elements and one E8M0 scale (uint8, 2^(e-127)) per block of 32 elements
/// along the last dimension.
struct MxTensor {
  at::Tensor data;    ///< fp8, the shape of the quantized tensor
  at::Tensor scales;  ///< uint8, shape [..., ceil(last dim / 32)]
};

/// MXFP8 block quantize (OCP MX v1.0, scales as TE's MXFP8BlockScaling; core::mx_block_exponent):
/// blocks of 32 along x's last dimension, the last block of a row may be shorter. A block holding
/// NaN is all NaN with kPropagate (torchao's to_mx); with kIgnore (TE) its amax skips the NaNs, so
/// only they stay NaN.
MxTensor quantize_mxfp8(const at::Tensor& x, at::ScalarType fp8_dtype = at::kFloat8_e4m3fn,
                        NanAmax nan = NanAmax::kPropagate);

/// Each element times its block's scale, rounded to out_dtype.
at::Tensor dequantize_mxfp8(const MxTensor& q, at::ScalarType out_dtype);

/// A tensor cast with one float32 scale per tile (core::quantize_fp8_tiles_): x read as rows of
/// its last dimension, cut into tiles of tile_rows x tile_cols (smaller at the edges).
struct TiledTensor {
  at::Tensor data;       ///< fp8, the shape of the quantized tensor
  at::Tensor scale_inv;  ///< float32 [ceil(rows / tile_rows), ceil(cols / tile_cols)]: 1 / scale
  std::int64_t tile_rows = 1;
  std::int64_t tile_cols = 1;
};

/// Tile-scaled quantize with the current rule per tile: scale = fp8_max / max(amax, eps), 1 for
/// an amax of 0 (with eps 0), inf or NaN, rounded down to a power of two with power_of_2_scales.
/// torchao's rowwise recipe is quantize_tiled(x, 1, x.size(-1), e4m3, true, 1e-12); TE's
/// Float8BlockScaling is tiles of 1 x 128 (activations, gradients) and 128 x 128 (weights) with
/// eps 0.
TiledTensor quantize_tiled(const at::Tensor& x, std::int64_t tile_rows, std::int64_t tile_cols,
                           at::ScalarType fp8_dtype = at::kFloat8_e4m3fn,
                           bool power_of_2_scales = true, double eps = 0.0,
                           NanAmax nan = NanAmax::kIgnore);

/// Each element times its tile's scale_inv, rounded to out_dtype.
at::Tensor dequantize_tiled(const TiledTensor& q, at::ScalarType out_dtype);

// ---- Recipes --------------------------------------------------------------------------------

/// How FP8 casts choose their scales.
enum class Scaling {
  kDelayed,  ///< TE DelayedScaling: scales from each tensor's amax history, updated per iteration
  kCurrent,  ///< torchao tensorwise / TE Float8CurrentScaling: from the tensor's own amax
  kMxfp8,    ///< TE MXFP8BlockScaling: an E8M0 scale per block of 32 (E4M3 elements)
  kNone,     ///< scale 1 everywhere: FP8 without scaling, for comparison (as enabled(false))
  kRowwise,  ///< torchao ROWWISE: the current rule per row of each GEMM operand (E4M3)
  kBlockwise,  ///< TE Float8BlockScaling: 1x128 tiles (activations, gradients), 128x128 (weights)
  /// TE NVFP4BlockScaling (4-bit E2M1, mixprec/fp4.h): E4M3 scales per block of 16 under a
  /// per-tensor fp32 scale; weights in 16x16 tiles, the weight-gradient GEMM's operands through
  /// the random Hadamard transform, gradients stochastically rounded (the disable_* options).
  kNvfp4,
  /// MXFP4 (torchao's to_mx with float4_e2m1fn_x2): E2M1 elements, an E8M0 scale per block of 32
  /// (mx_scale_mode). Transformer Engine has no MXFP4 recipe.
  kMxfp4,
};

/// Which format each tensor is cast to.
enum class Format {
  kE4M3,    ///< E4M3 for inputs, weights and gradients
  kHybrid,  ///< E4M3 for inputs and weights, E5M2 for gradients (TE's default)
};

/// How the delayed rule reduces a history (core::AmaxAlgo).
enum class AmaxAlgo { kMax, kMostRecent };

/// Every setting of a recipe; each default is TE's (delayed), torchao's (current eps).
struct RecipeOptions {
  TORCH_ARG(Scaling, scaling) = Scaling::kDelayed;
  /// kMxfp8, kRowwise and kBlockwise always use E4M3 elements (their anchors' defaults); the
  /// others follow this.
  TORCH_ARG(Format, format) = Format::kHybrid;
  /// Delayed: the scale is divided by 2^margin, in [-126, 127].
  TORCH_ARG(int, margin) = 0;
  /// Delayed: amaxes kept per tensor; fp8::Linear's buffers must have this length.
  TORCH_ARG(std::int64_t, amax_history_len) = 1024;
  TORCH_ARG(AmaxAlgo, amax_compute_algo) = AmaxAlgo::kMax;
  /// Current and rowwise: amaxes below eps count as eps (blockwise uses TE's amax_epsilon, 0).
  TORCH_ARG(double, eps) = 1e-12;
  /// Current, rowwise and blockwise: scales rounded down to powers of two. Unset: off for
  /// current (torchao tensorwise), on for rowwise (torchao ROWWISE) and blockwise (TE).
  TORCH_ARG(std::optional<bool>, power_of_2_scales) = std::nullopt;
  /// Every rule: how the amaxes it records and reduces treat NaN elements. kIgnore is TE's (its
  /// kernels take fmaxf): a NaN in one cast neither freezes a delayed scale for the history's
  /// length, nor gives a current scale of 1, nor turns an MX block into NaN. kPropagate is
  /// torchao's (x.abs().max()). docs/fp8.md compares them.
  TORCH_ARG(NanAmax, nan_amax) = NanAmax::kIgnore;
  /// NVFP4: no random Hadamard transform on the weight-gradient GEMM's operands (TE's option).
  TORCH_ARG(bool, disable_rht) = false;
  /// NVFP4: gradients rounded to nearest even instead of stochastically (TE's option).
  TORCH_ARG(bool, disable_stochastic_rounding) = false;
  /// NVFP4: weights in 1x16 blocks instead of 16x16 tiles (TE's option).
  TORCH_ARG(bool, disable_2d_quantization) = false;
  /// NVFP4 stochastic rounding: the Philox key. Each rounded cast takes the next counter offset,
  /// so a run is reproducible from its seed, on the CPU and CUDA alike (core::Nvfp4Options).
  TORCH_ARG(std::uint64_t, seed) = 0;
  /// MXFP4: how a block's E8M0 exponent is chosen (torchao's default: FLOOR).
  TORCH_ARG(fp4::MxScaleMode, mx_scale_mode) = fp4::MxScaleMode::kFloor;
};

namespace detail {
struct RecipeState;
}  // namespace detail

/// A recipe: its options and the delayed rule's bookkeeping (which tensors were cast since the
/// last update), shared by copies. One per model, kept across iterations.
///
/// **Example**
/// ```cpp
/// mixprec::fp8::Recipe recipe(mixprec::fp8::RecipeOptions().scaling(mixprec::fp8::Scaling::kDelayed));
/// ```
class Recipe {
 public:
  /// Throws c10::Error for invalid options (amax_history_len < 1, eps <= 0, ...).
  explicit Recipe(RecipeOptions options = {});

  const RecipeOptions& options() const;

  /// Delayed scaling's once-per-iteration update of every tensor cast since the last call:
  /// their slot-0 amaxes all-reduced in one collective (when an amax reduction is set), then
  /// core::delayed_scaling_update_ in one batched pass. Tensors not cast are left alone. No host
  /// synchronisation on CUDA. Nothing to do for the other rules. Autocast's constructor calls it.
  /// When the amax reduction throws (a collective that timed out), nothing has changed and the
  /// tensors stay recorded: the retry, or the next update, reduces the same amaxes in the same
  /// order, so every rank still gets the same scales.
  void update();

  /// The cross-rank reduction of the amaxes of one iteration: gets one float32 tensor of all of
  /// them and reduces it in place (mixprec::distributed::fp8_amax_reduction gives c10d's MAX,
  /// with NaN sent as inf). Every rank must cast the same tensors in the same order.
  void set_amax_reduction(std::function<void(at::Tensor&)> reduce);

  /// Internal: the state shared with the casts.
  const std::shared_ptr<detail::RecipeState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::RecipeState> state_;
};

/// Turns FP8 on for this thread in its scope, like TE's fp8_autocast: fp8::Linear modules run
/// their forward (and so their backward) with `recipe`. Its constructor first runs
/// recipe.update(), so the delayed scales of one iteration come from the amaxes up to the last
/// one; a scope nested in one of the same recipe (or a copy) is part of that iteration and does
/// not update again, as TE updates once per outermost fp8_autocast. A scope opened while grad
/// mode is off (torch::NoGradGuard, an eval loop) does not update either, as TE's fp8_autocast
/// updates only when torch.is_grad_enabled(): its casts still record their amaxes, which the next
/// scope with grad folds in. Scopes nest (the inner recipe wins until it ends); backward may run
/// after the scope.
///
/// **Example**
/// ```cpp
/// {
///   mixprec::fp8::Autocast fp8(recipe);
///   loss = torch::mse_loss(model->forward(x), y);
/// }
/// loss.backward();
/// ```
class Autocast {
 public:
  explicit Autocast(Recipe& recipe);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

  /// The recipe of the innermost active scope on this thread, or null outside every scope.
  static Recipe* current();

 private:
  Recipe* recipe_;
  Autocast* outer_;  // the enclosing scope on this thread, or null
};

// ---- fp8::Linear ----------------------------------------------------------------------------

/// Options of fp8::Linear (torch::nn::LinearOptions, plus the length of its amax histories).
struct LinearOptions {
  LinearOptions(std::int64_t in_features, std::int64_t out_features);
  TORCH_ARG(std::int64_t, in_features);
  TORCH_ARG(std::int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  /// Rows of the delayed-scaling history buffer; must equal the recipe's amax_history_len.
  TORCH_ARG(std::int64_t, amax_history_len) = 1024;
};

/// A drop-in for torch::nn::Linear (same parameters, same initialization). Outside an
/// fp8::Autocast scope it is torch::nn::Linear. Inside, forward casts the input and the weight
/// to FP8 and backward casts grad_output, each with its scale from the recipe; the GEMM is
/// at::_scaled_mm where LibTorch has it for the device (the CPU from LibTorch 2.14; CUDA from 2.5,
/// sm_89+, dimensions multiples of 16) and the output is fp32, fp16 or bf16 (on a CPU where
/// _scaled_mm would run oneDNN's reference FP8 kernel, what _scaled_mm computes without oneDNN,
/// bit for bit: docs/fp8.md), else the FP8 values are dequantized and multiplied in the input's
/// dtype (an emulation: the FP8 rounding is real, the speed is not). MXFP8, rowwise and blockwise
/// are emulated everywhere. The delayed-scaling state is made of buffers,
/// so torch::save / torch::load keep it.
class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
 public:
  LinearImpl(std::int64_t in_features, std::int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const LinearOptions& options);

  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  /// As torch::nn::Module::to, except that the FP8 state (amax_history, scale, scale_inv) stays
  /// float32, bit for bit: model->to(torch::kBFloat16) makes the parameters bf16, as TE's
  /// modules keep their FP8 metadata in fp32.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  using torch::nn::Module::to;

  /// input: [..., in_features] -> [..., out_features].
  at::Tensor forward(const at::Tensor& input);

  LinearOptions options;
  at::Tensor weight;  ///< [out_features, in_features]
  at::Tensor bias;    ///< [out_features], undefined without bias
  /// Delayed scaling: [amax_history_len, 3] float32, columns input, weight, grad_output; row 0
  /// holds this iteration's amaxes (TE's layout).
  at::Tensor amax_history;
  /// [3] float32: the scales of input, weight, grad_output (delayed; current: the last used).
  at::Tensor scale;
  /// [3] float32: 1 / scale.
  at::Tensor scale_inv;
};
TORCH_MODULE(Linear);

}  // namespace mixprec::fp8
