// fp8::Linear against the same computation built from PyTorch ops in this file (the cast chain,
// MXFP8 blocks of tests/torch/fp8_reference.h, at::linear / mm), bit for bit, forward and backward,
// for every recipe; the delayed rule's scales and histories against a simulation of Transformer
// Engine's fused update (common/recipe/delayed_scaling.cu: a tensor whose amax is 0 is left alone,
// fmaxf over the window, roll(-1), zero slot 0, (fp8_max * 2^-margin) / amax), with TE PR #825's
// fix (a module that did not run keeps its history); the NaN policies; no update without grad.
// CPU: the emulation path.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "mixprec/fp8.h"
#include "torch/fp8/fp8_state.h"  // detail::cpu_scaled_mm_is_onednn_reference
#include "torch/fp8_reference.h"
#include "torch/test_util.h"

namespace {

namespace fp8 = mixprec::fp8;
using fp8_ref::bitwise_equal;
using fp8_ref::scalar;

constexpr std::int64_t kIn = 40, kOut = 24;  // 40: one full MX block and a partial one
const at::ScalarType kE4M3 = at::kFloat8_e4m3fn;

struct Result {
  at::Tensor y, gx, gw, gb;
};

/// randn of `shape` (2-D after flattening the leading dims) times 2^(a_row + b_col), a and b
/// evenly over [-spread, spread]: each row and each column has its own magnitude, so an MX block
/// along rows differs from one along columns (within a block, small elements underflow into
/// FP8 subnormals or zero) and per-tensor casts both saturate and flush.
at::Tensor wide(std::vector<std::int64_t> shape, double spread) {
  const std::int64_t cols = shape.back();
  const std::int64_t rows = c10::multiply_integers(shape) / cols;
  const at::Tensor e = torch::linspace(-spread, spread, rows).unsqueeze(1) +
                       torch::linspace(-spread, spread, cols).unsqueeze(0);
  return (torch::randn({rows, cols}) * at::exp2(e)).view(shape);
}

/// Forward (under `recipe`, or outside every scope when null) and backward with upstream
/// gradient r: the loss is sum(y * r), so grad_output is r in y's dtype.
template <typename Module>
Result run(Module& lin, fp8::Recipe* recipe, const at::Tensor& x_in, const at::Tensor& r) {
  const at::Tensor x = x_in.detach().clone().requires_grad_(true);
  lin->zero_grad();
  at::Tensor y;
  if (recipe != nullptr) {
    fp8::Autocast scope(*recipe);
    y = lin->forward(x);
  } else {
    y = lin->forward(x);
  }
  (y.to(at::kFloat) * r).sum().backward();  // backward after the scope, as in training
  const at::Tensor gb = lin->bias.defined() ? lin->bias.grad() : at::Tensor();
  return {y.detach(), x.grad(), lin->weight.grad(), gb};
}

void expect_same(const Result& got, const Result& want) {
  EXPECT_TRUE(bitwise_equal(got.y, want.y)) << "forward";
  EXPECT_TRUE(bitwise_equal(got.gx, want.gx)) << "grad_input";
  EXPECT_TRUE(bitwise_equal(got.gw, want.gw)) << "grad_weight";
  if (want.gb.defined()) {
    EXPECT_TRUE(bitwise_equal(got.gb, want.gb)) << "grad_bias";
  }
}

at::Tensor bias_grad(const at::Tensor& g2, const at::Tensor& b) {
  if (!b.defined()) return b;
  const bool narrow = g2.scalar_type() == at::kHalf || g2.scalar_type() == at::kBFloat16;
  return at::sum(g2, {0}, false, narrow ? at::kFloat : g2.scalar_type()).to(b.scalar_type());
}

/// Scales (and their inverses) of the three casts: input, weight, grad_output.
struct Scales {
  float s[3] = {1, 1, 1};
  float inv[3] = {1, 1, 1};
};

/// Whether fp8::Linear's CPU GEMMs are at::_scaled_mm: LibTorch >= 2.14 has a CPU kernel, for
/// fp32, fp16 and bf16 outputs.
bool cpu_scaled_mm(at::ScalarType dtype) {
  return MIXPREC_TORCH_AT_LEAST(2, 14) &&
         (dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16);
}

/// Turns LibTorch's use of oneDNN off for its scope (at::_scaled_mm then takes its own CPU path).
class WithoutOneDnn {
 public:
  WithoutOneDnn() { at::globalContext().setUserEnabledMkldnn(false); }
  ~WithoutOneDnn() { at::globalContext().setUserEnabledMkldnn(was_); }

 private:
  bool was_ = at::globalContext().userEnabledMkldnn();
};

/// op(a) @ op(b) of FP8 operands with their scale_invs: at::_scaled_mm called directly (mat1
/// row-major, mat2 column-major) where fp8::Linear uses it, else dequantized and multiplied.
/// Where _scaled_mm would run oneDNN's reference kernel, fp8::Linear computes what _scaled_mm
/// computes without oneDNN: so does this, by _scaled_mm itself with oneDNN off.
at::Tensor ref_mm(const at::Tensor& aq, float a_inv, bool ta, const at::Tensor& bq, float b_inv,
                  bool tb, at::ScalarType dtype) {
#if MIXPREC_TORCH_AT_LEAST(2, 14)
  if (cpu_scaled_mm(dtype)) {
    const at::Tensor mat1 = ta ? aq.t().contiguous() : aq.contiguous();
    const at::Tensor mat2 = (tb ? bq.contiguous() : bq.t().contiguous()).t();
    std::optional<WithoutOneDnn> without_onednn;
    if (fp8::detail::cpu_scaled_mm_is_onednn_reference(aq.scalar_type(), bq.scalar_type())) {
      without_onednn.emplace();
    }
    return at::_scaled_mm(mat1, mat2, scalar(a_inv), scalar(b_inv), std::nullopt, std::nullopt,
                          dtype);
  }
#endif
  const at::Tensor ad = fp8_ref::dequantize(aq, scalar(a_inv), dtype);
  const at::Tensor bd = fp8_ref::dequantize(bq, scalar(b_inv), dtype);
  return (ta ? ad.t() : ad).mm(tb ? bd.t() : bd);
}

/// The per-tensor recipes built from PyTorch ops: each operand cast by the chain; forward
/// x @ w^T (+ bias); grad_input = g @ w, grad_weight = g^T @ x, each by ref_mm. Without
/// _scaled_mm the forward is at::linear of the dequantized operands (its bias fused).
Result reference_per_tensor(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                            const at::Tensor& r, const Scales& sc, at::ScalarType grad_fp8) {
  const at::ScalarType dtype = x.scalar_type();
  const at::Tensor x2 = x.reshape({-1, kIn});
  const at::Tensor xq = fp8_ref::quantize(x2, scalar(sc.s[0]), kE4M3);
  const at::Tensor wq = fp8_ref::quantize(w, scalar(sc.s[1]), kE4M3);
  std::vector<std::int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = kOut;
  const at::Tensor bias = b.defined() ? b.to(dtype) : b;
  at::Tensor y;
  if (cpu_scaled_mm(dtype)) {
    y = ref_mm(xq, sc.inv[0], false, wq, sc.inv[1], true, dtype);
    if (bias.defined()) y.add_(bias);
  } else {
    y = at::linear(fp8_ref::dequantize(xq, scalar(sc.inv[0]), dtype),
                   fp8_ref::dequantize(wq, scalar(sc.inv[1]), dtype), bias);
  }
  const at::Tensor g2 = r.to(dtype).reshape({-1, kOut});
  const at::Tensor gq = fp8_ref::quantize(g2, scalar(sc.s[2]), grad_fp8);
  return {y.view(out_shape),
          ref_mm(gq, sc.inv[2], false, wq, sc.inv[1], false, dtype).view(x.sizes()),
          ref_mm(gq, sc.inv[2], true, xq, sc.inv[0], false, dtype).to(w.scalar_type()),
          bias_grad(g2, b)};
}

/// MXFP8 from PyTorch ops: blocks along each GEMM's reduction dim (forward: in_features;
/// grad_input: out_features, so weight^T's rows; grad_weight: the batch, so g^T's and x^T's rows).
Result reference_mx(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                    const at::Tensor& r) {
  const at::ScalarType dtype = x.scalar_type();
  const auto mx = [&](const at::Tensor& t) {
    return fp8_ref::dequantize_mx(fp8_ref::quantize_mx(t.contiguous(), kE4M3), dtype);
  };
  const at::Tensor x2 = x.reshape({-1, kIn});
  std::vector<std::int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = kOut;
  const at::Tensor y = at::linear(mx(x2), mx(w), b.defined() ? b.to(dtype) : b).view(out_shape);
  const at::Tensor g2 = r.to(dtype).reshape({-1, kOut});
  return {y, mx(g2).mm(mx(w.t()).t()).view(x.sizes()),
          mx(g2.t()).mm(mx(x2.t()).t()).to(w.scalar_type()), bias_grad(g2, b)};
}

/// Rowwise (1 x cols, eps 1e-12) or blockwise (1 x 128, weights 128 x 128, eps 0) from PyTorch ops,
/// power-of-two scales (both recipes' defaults): blocks along each GEMM's reduction dim, as MXFP8.
Result reference_tiles(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                       const at::Tensor& r, bool rowwise) {
  const at::ScalarType dtype = x.scalar_type();
  const auto tiles = [&](const at::Tensor& t, bool weight) {
    const at::Tensor c = t.contiguous();
    const std::int64_t th = rowwise || !weight ? 1 : 128, tc = rowwise ? c.size(1) : 128;
    return fp8_ref::dequantize_tiles(
        fp8_ref::quantize_tiles(c, th, tc, kE4M3, /*pow2=*/true, rowwise ? 1e-12 : 0.0), th, tc,
        dtype);
  };
  const std::int64_t in = w.size(1), out = w.size(0);
  const at::Tensor x2 = x.reshape({-1, in});
  std::vector<std::int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = out;
  const at::Tensor y =
      at::linear(tiles(x2, false), tiles(w, true), b.defined() ? b.to(dtype) : b).view(out_shape);
  const at::Tensor g2 = r.to(dtype).reshape({-1, out});
  return {y, tiles(g2, false).mm(tiles(w.t(), true).t()).view(x.sizes()),
          tiles(g2.t(), false).mm(tiles(x2.t(), false).t()).to(w.scalar_type()), bias_grad(g2, b)};
}

/// The current rule as torchao writes it (fp8_max / max(amax, eps), in float32 here as the
/// core), with TE's guards: a non-finite amax gives 1, an infinite scale FLT_MAX.
float current_scale(const at::Tensor& t, double fp8_max, double eps) {
  const float amax = t.abs().max().to(at::kFloat).item<float>();
  if (!std::isfinite(amax)) return 1.0f;
  const float s = static_cast<float>(fp8_max) / std::max(amax, static_cast<float>(eps));
  return std::isinf(s) ? FLT_MAX : s;
}

TEST(Fp8LinearTest, OutsideAutocastIsTorchLinear) {
  for (const bool with_bias : {true, false}) {
    torch::manual_seed(7);
    torch::nn::Linear ref(torch::nn::LinearOptions(kIn, kOut).bias(with_bias));
    torch::manual_seed(7);
    fp8::Linear lin(fp8::LinearOptions(kIn, kOut).bias(with_bias));
    EXPECT_TRUE(bitwise_equal(lin->weight, ref->weight));  // same initialization
    if (with_bias) {
      EXPECT_TRUE(bitwise_equal(lin->bias, ref->bias));
    }
    std::vector<std::string> names;
    for (const auto& p : lin->named_parameters()) names.push_back(p.key());
    const std::vector<std::string> expected_names =
        with_bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"};
    EXPECT_EQ(names, expected_names);
    names.clear();
    for (const auto& p : lin->named_buffers()) names.push_back(p.key());
    EXPECT_EQ(names, (std::vector<std::string>{"amax_history", "scale", "scale_inv"}));
    EXPECT_EQ(lin->amax_history.sizes(), (std::vector<std::int64_t>{1024, 3}));
    EXPECT_TRUE(lin->scale.equal(torch::ones({3})));
    EXPECT_TRUE(lin->scale_inv.equal(torch::ones({3})));
    const at::Tensor x = torch::randn({2, 3, kIn});
    const at::Tensor r = torch::randn({2, 3, kOut});
    expect_same(run(lin, nullptr, x, r), run(ref, nullptr, x, r));
  }
  std::ostringstream printed;
  printed << fp8::Linear(kIn, kOut);
  EXPECT_EQ(printed.str(), "mixprec::fp8::Linear(in_features=40, out_features=24, bias=true)");
}

TEST(Fp8LinearTest, ToAnotherDtypeKeepsTheFp8StateFloat32) {
  // model->to(torch::kBFloat16), as a bf16 training run starts: the parameters become bf16, the
  // FP8 state stays float32 bit for bit (a bf16 scale would lose bits, and forward refuses it).
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(4));
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(4));
  run(lin, &recipe, torch::randn({2, kIn}) * 3.3, torch::randn({2, kOut}));
  { fp8::Autocast scope(recipe); }
  const at::Tensor history = lin->amax_history.clone(), scale = lin->scale.clone();
  torch::nn::Sequential model(lin);
  model->to(torch::kBFloat16);
  EXPECT_EQ(lin->weight.scalar_type(), at::kBFloat16);
  EXPECT_EQ(lin->bias.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(bitwise_equal(lin->amax_history, history));
  EXPECT_TRUE(bitwise_equal(lin->scale, scale));
  EXPECT_EQ(lin->named_buffers()["scale"].data_ptr(), lin->scale.data_ptr());  // still registered
  lin->to(torch::kCPU, torch::kDouble);
  EXPECT_EQ(lin->weight.scalar_type(), at::kDouble);
  EXPECT_TRUE(bitwise_equal(lin->scale, scale));
  lin->to(torch::kBFloat16);
  fp8::Autocast scope(recipe);
  EXPECT_EQ(lin(torch::randn({2, kIn}).to(at::kBFloat16)).scalar_type(), at::kBFloat16);
}

TEST(Fp8LinearTest, EveryRecipeMatchesPyTorchOpsBitForBit) {
  for (const auto& [dtype, with_bias] :
       {std::pair{at::kFloat, true}, std::pair{at::kBFloat16, true}, std::pair{at::kHalf, true},
        std::pair{at::kFloat, false}}) {
    for (const fp8::Scaling scaling :
         {fp8::Scaling::kDelayed, fp8::Scaling::kCurrent, fp8::Scaling::kNone, fp8::Scaling::kMxfp8,
          fp8::Scaling::kRowwise, fp8::Scaling::kBlockwise}) {
      for (const fp8::Format format : {fp8::Format::kE4M3, fp8::Format::kHybrid}) {
        const char* names[] = {"delayed", "current", "mxfp8", "none", "rowwise", "blockwise"};
        SCOPED_TRACE(::testing::Message()
                     << "dtype " << dtype << ", " << names[static_cast<int>(scaling)] << ", format "
                     << (format == fp8::Format::kHybrid ? "hybrid" : "e4m3")
                     << (with_bias ? "" : ", no bias"));
        torch::manual_seed(11);
        fp8::Linear lin(fp8::LinearOptions(kIn, kOut).bias(with_bias));
        fp8::Recipe recipe(fp8::RecipeOptions().scaling(scaling).format(format));
        // Magnitudes over 2^-16..2^16 (x, weight; fp16 x: 2^-12..2^12, within its range) and
        // 2^-26..2^6 (grad_output), varying along both dims of each GEMM operand (see wide()).
        {
          torch::NoGradGuard no_grad;
          lin->weight.mul_(wide({kOut, kIn}, 8).abs());
        }
        const at::Tensor x = wide({2, 3, kIn}, dtype == at::kHalf ? 6 : 8).to(dtype);
        const at::Tensor r = wide({2, 3, kOut}, 8) * 1e-3;
        const Result got = run(lin, &recipe, x, r);
        const at::Tensor b = with_bias ? lin->bias.detach() : at::Tensor();
        const bool blocks = scaling == fp8::Scaling::kMxfp8 || scaling == fp8::Scaling::kRowwise ||
                            scaling == fp8::Scaling::kBlockwise;
        const at::ScalarType grad_fp8 =
            format == fp8::Format::kHybrid && !blocks ? at::kFloat8_e5m2 : kE4M3;
        Scales sc;  // delayed, first iteration, and none: 1
        if (scaling == fp8::Scaling::kCurrent) {
          const at::Tensor g = r.to(dtype);
          sc.s[0] = current_scale(x, 448, 1e-12);
          sc.s[1] = current_scale(lin->weight, 448, 1e-12);  // the float weight is cast
          sc.s[2] = current_scale(g, fp8_ref::fp8_max(grad_fp8), 1e-12);
          for (int i = 0; i < 3; ++i) sc.inv[i] = 1.0f / sc.s[i];
          // The module's buffers hold the scales used.
          EXPECT_TRUE(bitwise_equal(lin->scale, torch::tensor({sc.s[0], sc.s[1], sc.s[2]})));
          EXPECT_TRUE(
              bitwise_equal(lin->scale_inv, torch::tensor({sc.inv[0], sc.inv[1], sc.inv[2]})));
        }
        const at::Tensor w = lin->weight.detach();
        const Result want =
            scaling == fp8::Scaling::kMxfp8 ? reference_mx(x, w, b, r)
            : scaling == fp8::Scaling::kRowwise || scaling == fp8::Scaling::kBlockwise
                ? reference_tiles(x, w, b, r, scaling == fp8::Scaling::kRowwise)
                : reference_per_tensor(x, w, b, r, sc, grad_fp8);
        expect_same(got, want);
        // FP8 changed the result (the test would not see a recipe that does nothing).
        EXPECT_FALSE(got.y.equal(
            at::linear(x, lin->weight.detach().to(dtype), b.defined() ? b.to(dtype) : b)));
        EXPECT_EQ(got.gw.scalar_type(), at::kFloat);
      }
    }
  }
}

TEST(Fp8LinearTest, OneDnnsReferenceKernelIsAvoidedOnlyWhereScaledMmWouldRunIt) {
  // LibTorch 2.15's _scaled_mm gives oneDNN same-dtype operands on a CPU with AMX-INT8, mixed ones
  // with AMX-FP16 (docs/fp8.md); fp8::Linear steps aside only in the first case, and never with
  // oneDNN off. Whether this CPU is such a one, EveryRecipeMatchesPyTorchOpsBitForBit checks.
  using fp8::detail::cpu_scaled_mm_is_onednn_reference;
  EXPECT_FALSE(cpu_scaled_mm_is_onednn_reference(at::kFloat8_e5m2, at::kFloat8_e4m3fn));
  EXPECT_FALSE(cpu_scaled_mm_is_onednn_reference(at::kFloat8_e4m3fn, at::kFloat8_e5m2));
  {
    WithoutOneDnn without_onednn;
    EXPECT_FALSE(cpu_scaled_mm_is_onednn_reference(at::kFloat8_e4m3fn, at::kFloat8_e4m3fn));
  }
  if (!MIXPREC_TORCH_AT_LEAST(2, 14)) {
    EXPECT_FALSE(cpu_scaled_mm_is_onednn_reference(at::kFloat8_e4m3fn, at::kFloat8_e4m3fn));
  }
}

TEST(Fp8LinearTest, CpuGemmIsScaledMmWithinItsToleranceOfDequantizeAndMatmul) {
  // LibTorch >= 2.14: the CPU GEMMs are at::_scaled_mm (bit for bit in the tests above); here
  // they are held against the emulation they replace, dequantize-and-matmul, within the
  // tolerance docs/fp8.md gives (the operands are the same FP8 values; only the accumulation
  // and the rounding of the output differ).
  if (!cpu_scaled_mm(at::kFloat)) GTEST_SKIP() << "no CPU at::_scaled_mm before LibTorch 2.14";
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(dtype);
    torch::manual_seed(23);
    fp8::Linear lin(fp8::LinearOptions(kIn, kOut));
    fp8::Recipe recipe(fp8::RecipeOptions().scaling(fp8::Scaling::kCurrent));
    const at::Tensor x = torch::randn({64, kIn}).to(dtype);
    const at::Tensor r = torch::randn({64, kOut}).to(dtype);
    const Result got = run(lin, &recipe, x, r);
    const at::Tensor inv = lin->scale_inv;
    const at::Tensor xd =
        fp8_ref::dequantize(fp8_ref::quantize(x, lin->scale[0], kE4M3), inv[0], at::kFloat);
    const at::Tensor wd = fp8_ref::dequantize(
        fp8_ref::quantize(lin->weight.detach(), lin->scale[1], kE4M3), inv[1], at::kFloat);
    const at::Tensor gd = fp8_ref::dequantize(fp8_ref::quantize(r, lin->scale[2], at::kFloat8_e5m2),
                                              inv[2], at::kFloat);
    const double rtol = dtype == at::kFloat ? 1e-5 : 1e-2;  // bf16: its own rounding
    const auto close = [&](const at::Tensor& a, const at::Tensor& b) {
      return at::allclose(a.to(at::kFloat), b, rtol, rtol * b.abs().max().item<double>());
    };
    EXPECT_TRUE(close(got.y, at::linear(xd, wd, lin->bias.detach())));
    EXPECT_TRUE(close(got.gx, gd.mm(wd)));
    EXPECT_TRUE(close(got.gw, gd.t().mm(xd)));
  }
}

TEST(Fp8LinearTest, BlockwiseAndRowwiseOnRaggedTilesMatchPyTorchOpsBitForBit) {
  // Sizes that are not multiples of 128: activation tiles 1 x 128 with a short last one, weight
  // tiles 128 x 128 short at the bottom and the right, and 130 rows (the batch is the reduction
  // dim of grad_weight).
  for (const fp8::Scaling scaling : {fp8::Scaling::kBlockwise, fp8::Scaling::kRowwise}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(::testing::Message()
                   << (scaling == fp8::Scaling::kRowwise ? "rowwise" : "blockwise") << " "
                   << dtype);
      torch::manual_seed(24);
      fp8::Linear lin(fp8::LinearOptions(300, 200));
      fp8::Recipe recipe(fp8::RecipeOptions().scaling(scaling));
      {
        torch::NoGradGuard no_grad;
        lin->weight.mul_(wide({200, 300}, 6).abs());
      }
      const at::Tensor x = wide({130, 300}, 8).to(dtype);
      const at::Tensor r = wide({130, 200}, 8) * 1e-3;
      const Result got = run(lin, &recipe, x, r);
      expect_same(got, reference_tiles(x, lin->weight.detach(), lin->bias.detach(), r,
                                       scaling == fp8::Scaling::kRowwise));
    }
  }
}

TEST(Fp8LinearTest, CurrentScalingPowerOfTwoAndEps) {
  torch::manual_seed(12);
  fp8::Linear lin(kIn, kOut);
  fp8::Recipe recipe(
      fp8::RecipeOptions().scaling(fp8::Scaling::kCurrent).power_of_2_scales(true).eps(1e-3));
  const at::Tensor x = torch::randn({5, kIn}) * 1e-6;  // amax below eps: eps counts
  const at::Tensor r = torch::randn({5, kOut});
  const Result got = run(lin, &recipe, x, r);
  Scales sc;
  sc.s[0] = std::exp2(std::floor(std::log2(448.0f / 1e-3f)));
  sc.s[1] = std::exp2(std::floor(std::log2(current_scale(lin->weight, 448, 1e-3))));
  sc.s[2] = std::exp2(std::floor(std::log2(current_scale(r, 57344, 1e-3))));
  for (int i = 0; i < 3; ++i) sc.inv[i] = 1.0f / sc.s[i];
  EXPECT_TRUE(bitwise_equal(lin->scale, torch::tensor({sc.s[0], sc.s[1], sc.s[2]})));
  expect_same(got, reference_per_tensor(x, lin->weight.detach(), lin->bias.detach(), r, sc,
                                        at::kFloat8_e5m2));
}

/// Transformer Engine's delayed-scaling bookkeeping for one module, simulated with PyTorch ops as
/// its fused kernel does it (common/recipe/delayed_scaling.cu, kernel_bulk).
struct DelayedReference {
  at::Tensor history;
  Scales sc;
  bool cast[3] = {false, false, false};

  explicit DelayedReference(std::int64_t len) : history(torch::zeros({len, 3})) {}

  void record(int column, const at::Tensor& t) {
    // Detached: the reference's history must not join the weight's autograd graph (an in-place
    // write of a value that requires grad would, and the roll's in-place copy then leaks a cycle).
    history[0][column] = at::maximum(history[0][column], t.detach().abs().max().to(at::kFloat));
    cast[column] = true;
  }

  void update(const fp8::RecipeOptions& o) {
    const double maxes[3] = {448, 448, o.format() == fp8::Format::kHybrid ? 57344.0 : 448.0};
    for (int c = 0; c < 3; ++c) {
      if (!cast[c]) continue;  // TE PR #825: a tensor not cast is not rolled
      cast[c] = false;
      at::Tensor col = history.select(1, c);
      if (col[0].item<float>() == 0.0f) continue;  // the fused kernel: amax 0, nothing changes
      const bool skip_nan = o.nan_amax() == fp8::NanAmax::kIgnore;
      const float amax = o.amax_compute_algo() == fp8::AmaxAlgo::kMostRecent ? col[0].item<float>()
                         : skip_nan ? at::nan_to_num(col, 0.0).max().item<float>()  // fmaxf
                                    : col.max().item<float>();
      if (amax > 0 && std::isfinite(amax)) {
        float s = std::ldexp(static_cast<float>(maxes[c]), -o.margin()) / amax;
        if (std::isinf(s)) s = FLT_MAX;  // TE PR #786
        sc.s[c] = s;
        sc.inv[c] = 1.0f / s;
      }
      col.copy_(torch::roll(col, -1, 0));
      col[0] = 0.0f;
    }
  }
};

TEST(Fp8LinearTest, DelayedScalesFollowTransformerEngine) {
  for (const fp8::Format format : {fp8::Format::kHybrid, fp8::Format::kE4M3})
    for (const fp8::AmaxAlgo algo : {fp8::AmaxAlgo::kMax, fp8::AmaxAlgo::kMostRecent}) {
      SCOPED_TRACE(static_cast<int>(algo));
      SCOPED_TRACE(format == fp8::Format::kE4M3 ? "E4M3 gradients" : "E5M2 gradients");
      const auto options =
          fp8::RecipeOptions().amax_history_len(4).margin(1).amax_compute_algo(algo).format(format);
      fp8::Recipe recipe(options);
      torch::manual_seed(13);
      fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(4));
      DelayedReference ref(4);
      // Amaxes rise, fall to zero (most_recent keeps the old scale), then jump far past the
      // stale scale's range (saturation).
      const double factors[] = {1, 3, 0.5, 0, 2, 40, 1, 0.1};
      for (int it = 0; it < 8; ++it) {
        SCOPED_TRACE(it);
        const at::Tensor x = torch::randn({3, kIn}) * factors[it];
        const at::Tensor r = torch::randn({3, kOut}) * factors[it] * 1e-2;
        if (it > 0) ref.update(options);  // what Autocast's constructor does
        const Result got = run(lin, &recipe, x, r);
        const Result want =
            reference_per_tensor(x, lin->weight.detach(), lin->bias.detach(), r, ref.sc,
                                 format == fp8::Format::kE4M3 ? kE4M3 : at::kFloat8_e5m2);
        expect_same(got, want);
        ref.record(0, x);
        ref.record(1, lin->weight);
        ref.record(2, r);
        EXPECT_TRUE(bitwise_equal(lin->amax_history, ref.history));
        EXPECT_TRUE(
            bitwise_equal(lin->scale, torch::tensor({ref.sc.s[0], ref.sc.s[1], ref.sc.s[2]})));
        EXPECT_TRUE(bitwise_equal(lin->scale_inv,
                                  torch::tensor({ref.sc.inv[0], ref.sc.inv[1], ref.sc.inv[2]})));
        torch::NoGradGuard no_grad;
        lin->weight.mul_(1.25);  // as an optimizer step would change it
      }
    }
}

TEST(Fp8LinearTest, ColumnsNotCastInAnIterationKeepTheirHistoryAndScale) {
  // After the histories are filled, an iteration that casts only the input and the weight (a
  // forward whose backward never runs): the update rolls those two columns, not grad_output's.
  const auto options = fp8::RecipeOptions().amax_history_len(3);
  fp8::Recipe recipe(options);
  torch::manual_seed(21);
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(3));
  DelayedReference ref(3);
  for (int it = 0; it < 5; ++it) {
    const at::Tensor x = torch::randn({3, kIn}) * (it + 1);
    const at::Tensor r = torch::randn({3, kOut}) * (5 - it);
    if (it > 0) ref.update(options);
    run(lin, &recipe, x, r);
    ref.record(0, x);
    ref.record(1, lin->weight);
    ref.record(2, r);
  }
  ASSERT_TRUE(lin->amax_history.narrow(0, 1, 2).select(1, 2).gt(0).all().item<bool>());
  ref.update(options);
  const at::Tensor x = torch::randn({3, kIn}) * 7;
  {
    fp8::Autocast scope(recipe);  // the update of the fifth iteration
    lin(x);                       // no backward
  }
  ref.record(0, x);
  ref.record(1, lin->weight);
  const at::Tensor grad_history = lin->amax_history.select(1, 2).clone();
  const float grad_scale = lin->scale[2].item<float>();
  ref.update(options);
  { fp8::Autocast scope(recipe); }
  EXPECT_TRUE(bitwise_equal(lin->amax_history, ref.history));
  EXPECT_TRUE(bitwise_equal(lin->amax_history.select(1, 2), grad_history));
  EXPECT_EQ(lin->scale[2].item<float>(), grad_scale);
  EXPECT_TRUE(bitwise_equal(lin->scale, torch::tensor({ref.sc.s[0], ref.sc.s[1], ref.sc.s[2]})));
}

TEST(Fp8LinearTest, ACastOfZerosNeitherRollsNorRescales) {
  // TE's fused kernel (PR #825): an amax of 0 leaves that tensor's history and scale alone, where
  // TE's unfused Python path rolled a 0 in.
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(3));
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(3));
  run(lin, &recipe, torch::randn({2, kIn}), torch::randn({2, kOut}));
  { fp8::Autocast scope(recipe); }
  const at::Tensor history = lin->amax_history.clone(), scale = lin->scale.clone();
  run(lin, &recipe, torch::zeros({2, kIn}), torch::zeros({2, kOut}));  // input and grad: zeros
  { fp8::Autocast scope(recipe); }
  EXPECT_TRUE(bitwise_equal(lin->amax_history.select(1, 0), history.select(1, 0)));
  EXPECT_TRUE(bitwise_equal(lin->amax_history.select(1, 2), history.select(1, 2)));
  EXPECT_FALSE(lin->amax_history.select(1, 1).equal(history.select(1, 1)));  // the weight rolled
  EXPECT_TRUE(bitwise_equal(lin->scale, scale));  // the weight's window still holds its amax
}

TEST(Fp8LinearTest, AScopeWithoutGradDoesNotUpdate) {
  // TE updates only when torch.is_grad_enabled(): an eval loop under NoGradGuard neither rolls
  // the histories nor changes the scales; its amaxes join the next update with grad.
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(4));
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(4));
  run(lin, &recipe, torch::randn({2, kIn}), torch::randn({2, kOut}));
  { fp8::Autocast scope(recipe); }
  run(lin, &recipe, torch::randn({2, kIn}), torch::randn({2, kOut}));
  const at::Tensor history = lin->amax_history.clone(), scale = lin->scale.clone();
  const at::Tensor x_eval = torch::randn({2, kIn}) * 100;
  {
    torch::NoGradGuard no_grad;
    for (int i = 0; i < 3; ++i) {
      fp8::Autocast scope(recipe);
      lin(x_eval);
    }
  }
  EXPECT_TRUE(bitwise_equal(lin->amax_history.narrow(0, 1, 3), history.narrow(0, 1, 3)));
  EXPECT_TRUE(bitwise_equal(lin->scale, scale));
  const float eval_amax = x_eval.abs().max().item<float>();
  EXPECT_EQ(lin->amax_history[0][0].item<float>(), eval_amax);  // recorded, not rolled
  { fp8::Autocast scope(recipe); }  // with grad: one update, the eval amax in it
  EXPECT_EQ(lin->amax_history[3][0].item<float>(), eval_amax);
  EXPECT_EQ(lin->scale[0].item<float>(), 448.0f / eval_amax);
}

TEST(Fp8LinearTest, ANaNInACastIsSkippedByDefaultAndPropagatedOnRequest) {
  torch::manual_seed(22);
  at::Tensor x = torch::randn({2, kIn});
  x[1][3] = std::nanf("");
  const float amax_x = x.nan_to_num(0.0).abs().max().item<float>();  // of the other elements
  for (const fp8::NanAmax nan : {fp8::NanAmax::kIgnore, fp8::NanAmax::kPropagate}) {
    const bool ignore = nan == fp8::NanAmax::kIgnore;
    SCOPED_TRACE(ignore ? "kIgnore" : "kPropagate");
    {  // delayed: the NaN is left out of the amax (TE), or holds the scale for the window
      fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(3).nan_amax(nan));
      fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(3));
      {
        fp8::Autocast scope(recipe);
        lin(x);
      }
      const float slot = lin->amax_history[0][0].item<float>();
      if (ignore) {
        EXPECT_EQ(slot, amax_x);
      } else {
        EXPECT_TRUE(std::isnan(slot));
      }
      for (int i = 0; i < 3; ++i) {  // three more updates: the NaN stays in a window of 3
        fp8::Autocast scope(recipe);
        lin(x.nan_to_num(0.0));
      }
      EXPECT_EQ(lin->scale[0].item<float>(), ignore ? 448.0f / amax_x : 1.0f);
      { fp8::Autocast scope(recipe); }  // the NaN (kPropagate) has left the window
      EXPECT_EQ(lin->scale[0].item<float>(), 448.0f / amax_x);
    }
    {  // current: the scale of the other elements (TE), or 1 (torchao's NaN amax, TE's guard)
      fp8::Recipe recipe(fp8::RecipeOptions().scaling(fp8::Scaling::kCurrent).nan_amax(nan));
      fp8::Linear lin(kIn, kOut);
      fp8::Autocast scope(recipe);
      lin(x);
      EXPECT_EQ(lin->scale[0].item<float>(), ignore ? 448.0f / amax_x : 1.0f);
    }
  }
}

TEST(Fp8LinearTest, BackwardAfterTheNextUpdateReadsTheForwardCasts) {
  // Backward dequantizes the input and weight saved in forward with the scale_inv they were cast
  // with, even when an update (the next Autocast) changed the buffers in between.
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(2));
  torch::manual_seed(16);
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(2));
  const at::Tensor x_in = wide({3, kIn}, 4);
  const at::Tensor r = torch::randn({3, kOut});
  const at::Tensor x = x_in.clone().requires_grad_(true);
  at::Tensor y;
  {
    fp8::Autocast scope(recipe);
    y = lin(x);
  }
  { fp8::Autocast next(recipe); }  // updates the input and weight scales
  EXPECT_NE(lin->scale_inv[0].item<float>(), 1.0f);
  EXPECT_NE(lin->scale_inv[1].item<float>(), 1.0f);
  (y * r).sum().backward();
  // Forward cast with scale 1; grad_output's scale is still 1 (it was not cast before).
  const Result want = reference_per_tensor(x_in, lin->weight.detach(), lin->bias.detach(), r,
                                           Scales{}, at::kFloat8_e5m2);
  expect_same({y.detach(), x.grad(), lin->weight.grad(), lin->bias.grad()}, want);
}

TEST(Fp8LinearTest, ModuleNotRunKeepsItsHistory) {
  // TE PR #825: rolling the histories of modules that did not run changed their scales.
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(3));
  fp8::Linear a(fp8::LinearOptions(kIn, kIn).amax_history_len(3));
  fp8::Linear b(fp8::LinearOptions(kIn, kIn).amax_history_len(3));
  const auto iteration = [&](bool use_b) {
    const at::Tensor x = torch::randn({4, kIn}, torch::requires_grad());
    at::Tensor y;
    {
      fp8::Autocast scope(recipe);
      y = a(x);
      if (use_b) y = b(y);
    }
    y.sum().backward();
  };
  iteration(true);
  iteration(true);
  iteration(false);  // b idle: its slot 0 stays 0 and it is not recorded
  const at::Tensor b_history = b->amax_history.clone(), b_scale = b->scale.clone();
  const at::Tensor a_history = a->amax_history.clone();
  { fp8::Autocast scope(recipe); }  // the update of the iteration b sat out
  EXPECT_TRUE(bitwise_equal(b->amax_history, b_history));
  EXPECT_TRUE(bitwise_equal(b->scale, b_scale));
  EXPECT_FALSE(a->amax_history.equal(a_history));  // a was rolled
  EXPECT_TRUE(a->amax_history[0].eq(0).all().item<bool>());
}

TEST(Fp8LinearTest, ModuleUsedTwiceIsRecordedOnce) {
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(3));
  fp8::Linear lin(fp8::LinearOptions(kIn, kIn).amax_history_len(3));
  const at::Tensor x = torch::randn({4, kIn});
  at::Tensor y1, y2;
  {
    fp8::Autocast scope(recipe);
    y1 = lin(x);
    y2 = lin(y1);
  }
  y1.retain_grad();
  y2.sum().backward();
  const float amax_in = std::max(x.abs().max().item<float>(), y1.abs().max().item<float>());
  const float amax_grad = std::max(1.0f, y1.grad().abs().max().item<float>());
  EXPECT_EQ(lin->amax_history[0][0].item<float>(), amax_in);
  EXPECT_EQ(lin->amax_history[0][2].item<float>(), amax_grad);
  { fp8::Autocast scope(recipe); }
  // Rolled once: this iteration's amaxes in the last slot, nothing else.
  EXPECT_EQ(lin->amax_history[2][0].item<float>(), amax_in);
  EXPECT_EQ(lin->amax_history.narrow(0, 0, 2).abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(lin->scale[0].item<float>(), 448.0f / amax_in);
}

TEST(Fp8LinearTest, NestedScopeOfTheSameRecipeDoesNotUpdateAgain) {
  // TE updates once per outermost fp8_autocast: an inner scope of the same recipe (or of a copy,
  // which shares its state) must not roll the histories of the casts made so far.
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(2)), other;
  fp8::Recipe copy = recipe;
  int updates = 0;
  recipe.set_amax_reduction([&](at::Tensor&) { ++updates; });
  fp8::Linear lin(fp8::LinearOptions(kIn, kIn).amax_history_len(2));
  const at::Tensor x = torch::randn({4, kIn});
  {
    fp8::Autocast outer(recipe);
    lin(x);
    { fp8::Autocast inner(recipe); }
    { fp8::Autocast inner(copy); }
    {
      fp8::Autocast between(other);
      fp8::Autocast innermost(recipe);  // an enclosing scope (outer) has it
    }
    EXPECT_EQ(updates, 0);
  }
  EXPECT_EQ(lin->amax_history[0][0].item<float>(), x.abs().max().item<float>());  // not rolled
  { fp8::Autocast next(recipe); }
  EXPECT_EQ(updates, 1);
  EXPECT_EQ(lin->amax_history[1][0].item<float>(), x.abs().max().item<float>());
}

TEST(Fp8LinearTest, AmaxReductionGetsEveryAmaxInFirstCastOrder) {
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(2));
  at::Tensor seen;
  recipe.set_amax_reduction([&](at::Tensor& amaxes) {
    seen = amaxes.clone();
    amaxes.mul_(2);  // as if another rank saw twice the amaxes
  });
  fp8::Linear a(fp8::LinearOptions(kIn, kIn).amax_history_len(2));
  fp8::Linear b(fp8::LinearOptions(kIn, kOut).amax_history_len(2));
  const at::Tensor x = torch::randn({4, kIn});
  const at::Tensor r = torch::randn({4, kOut});
  at::Tensor h, y;
  {
    fp8::Autocast scope(recipe);
    h = a(x);
    y = b(h);
  }
  h.retain_grad();
  (y * r).sum().backward();
  { fp8::Autocast scope(recipe); }
  const auto amax = [](const at::Tensor& t) { return t.abs().max().item<float>(); };
  // Forward: a's input and weight, b's input and weight; backward: b's grad, then a's.
  const std::vector<float> expected = {amax(x),         amax(a->weight), amax(h),
                                       amax(b->weight), amax(r),         amax(h.grad())};
  ASSERT_TRUE(seen.defined());
  EXPECT_TRUE(bitwise_equal(seen, torch::tensor(expected)));
  EXPECT_EQ(a->scale[0].item<float>(), 448.0f / (2 * expected[0]));
  EXPECT_EQ(b->scale[2].item<float>(), 57344.0f / (2 * expected[4]));
  EXPECT_EQ(a->amax_history[1][0].item<float>(), 2 * expected[0]);  // the reduced value kept
}

// Note [An update whose collective throws]: a reduction that throws (a collective's timeout)
// keeps the iteration's amaxes recorded, and the retry ends where an update that never failed
// ends. Before, the amaxes were taken and lost: the retry updated nothing, and ranks whose
// collective had gone through held other scales.
TEST(Fp8LinearTest, AReductionThatThrowsKeepsTheAmaxesForTheRetry) {
  fp8::Recipe failing(fp8::RecipeOptions().amax_history_len(2));
  fp8::Recipe reference(fp8::RecipeOptions().amax_history_len(2));
  bool fail = true;
  failing.set_amax_reduction([&](at::Tensor& amaxes) {
    if (std::exchange(fail, false)) throw std::runtime_error("all-reduce timed out");
    amaxes.mul_(2);
  });
  reference.set_amax_reduction([](at::Tensor& amaxes) { amaxes.mul_(2); });
  torch::manual_seed(3);
  fp8::Linear a(fp8::LinearOptions(kIn, kOut).amax_history_len(2));
  torch::manual_seed(3);
  fp8::Linear b(fp8::LinearOptions(kIn, kOut).amax_history_len(2));
  const at::Tensor x = torch::randn({4, kIn}), r = torch::randn({4, kOut});
  run(a, &failing, x, r);
  run(b, &reference, x, r);
  EXPECT_THROW({ fp8::Autocast scope(failing); }, std::runtime_error);
  EXPECT_TRUE(bitwise_equal(a->scale, torch::ones({3})));  // nothing changed
  { fp8::Autocast retry(failing); }
  { fp8::Autocast once(reference); }
  EXPECT_FALSE(bitwise_equal(b->scale, torch::ones({3})));
  EXPECT_TRUE(bitwise_equal(a->amax_history, b->amax_history));
  EXPECT_TRUE(bitwise_equal(a->scale, b->scale));
  EXPECT_TRUE(bitwise_equal(a->scale_inv, b->scale_inv));
}

TEST(Fp8LinearTest, StateRoundTripsThroughTorchSave) {
  fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(5));
  torch::manual_seed(14);
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(5));
  for (int it = 0; it < 3; ++it) run(lin, &recipe, torch::randn({3, kIn}), torch::randn({3, kOut}));
  { fp8::Autocast scope(recipe); }
  std::stringstream archive;
  torch::save(lin, archive);
  torch::manual_seed(15);
  fp8::Linear loaded(fp8::LinearOptions(kIn, kOut).amax_history_len(5));
  torch::load(loaded, archive);
  for (const auto& p : lin->named_parameters()) {
    EXPECT_TRUE(bitwise_equal(loaded->named_parameters()[p.key()], p.value())) << p.key();
  }
  for (const auto& p : lin->named_buffers()) {
    EXPECT_TRUE(bitwise_equal(loaded->named_buffers()[p.key()], p.value())) << p.key();
  }
  EXPECT_FALSE(lin->scale.equal(torch::ones({3})));  // the state saved was not the initial one
}

TEST(Fp8LinearTest, Errors) {
  fp8::Recipe recipe;  // delayed, history 1024
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).amax_history_len(16));
  {
    fp8::Autocast scope(recipe);
    EXPECT_THROW_WITH(lin(torch::randn({2, kIn})),
                      "amax_history has 16 rows but the recipe's amax_history_len is 1024");
    EXPECT_THROW_WITH(lin(torch::randn({2, kIn - 1})), "mat1 and mat2 shapes cannot be multiplied");
  }
  // The other rules do not read the history.
  fp8::Recipe current(fp8::RecipeOptions().scaling(fp8::Scaling::kCurrent));
  fp8::Autocast scope(current);
  EXPECT_EQ(lin(torch::randn({kIn})).sizes(), (std::vector<std::int64_t>{kOut}));
  // No grad: forward only, nothing saved.
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(lin(torch::randn({2, kIn})).requires_grad());
}

}  // namespace
