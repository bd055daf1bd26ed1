// fp8::Linear under the 4-bit recipes (Scaling::kNvfp4, kMxfp4) against the same computation
// built here from mixprec::fp4's ops and at::linear / mm, bit for bit, forward and backward: TE's
// NVFP4BlockScaling (1D activations and gradients, 16x16 weight tiles, the RHT on the weight
// gradient's operands, stochastically rounded gradients with the recipe's Philox offsets 0, 1, ...
// in cast order) and MXFP4. The forward GEMM against TE's alpha formula; the options that turn
// TE's features off; stochastic rounding reproducible from the seed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>

#include "mixprec/fp4.h"
#include "mixprec/fp8.h"
#include "torch/fp8/fp4_detail.h"  // the recipe's RHT and stochastic cast
#include "torch/fp8_reference.h"

namespace {

namespace fp4 = mixprec::fp4;
namespace fp8 = mixprec::fp8;
using fp8_ref::bitwise_equal;

// Multiples of 32: every operand of every GEMM (and its transpose) is whole MXFP4 blocks, NVFP4
// blocks and 16x16 tiles, and the batch whole RHT runs.
constexpr std::int64_t kBatch = 32, kIn = 64, kOut = 32;
constexpr std::uint64_t kSeed = 1234;

struct Result {
  at::Tensor y, gx, gw, gb;
};

// Forward under `recipe` and backward with upstream gradient r (the loss is sum(y * r)).
Result run(fp8::Linear& lin, fp8::Recipe& recipe, const at::Tensor& x_in, const at::Tensor& r) {
  const at::Tensor x = x_in.detach().clone().requires_grad_(true);
  lin->zero_grad();
  at::Tensor y;
  {
    fp8::Autocast scope(recipe);
    y = lin->forward(x);
  }
  (y.to(at::kFloat) * r).sum().backward();
  return {y.detach(), x.grad(), lin->weight.grad(),
          lin->bias.defined() ? lin->bias.grad() : at::Tensor()};
}

// Rows and columns of different magnitudes, so that blocks along either dimension differ.
at::Tensor wide(std::int64_t rows, std::int64_t cols, double spread) {
  const at::Tensor e = torch::linspace(-spread, spread, rows).unsqueeze(1) +
                       torch::linspace(-spread, spread, cols).unsqueeze(0);
  return torch::randn({rows, cols}) * at::exp2(e);
}

// The NVFP4 casts of the recipe, from the ops: 1D, 2D tiles, or stochastic (offset) after the RHT.
at::Tensor nv(const at::Tensor& t, bool two_d, at::ScalarType dtype) {
  return fp4::dequantize_nvfp4(fp4::quantize_nvfp4(t, two_d), dtype);
}
at::Tensor nv_rounded(const at::Tensor& t, bool rht, bool stochastic, std::uint64_t offset,
                      at::ScalarType dtype) {
  mixprec::core::Nvfp4Options rule;
  rule.stochastic = stochastic;
  rule.seed = kSeed;
  rule.offset = offset;
  const at::Tensor src = rht ? fp4::detail::hadamard16(t) : t;
  return fp4::dequantize_nvfp4(fp4::detail::quantize_nvfp4(src, rule), dtype);
}

struct Case {
  bool rht = true, stochastic = true, two_d = true;
};

Result reference_nvfp4(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                       const at::Tensor& r, const Case& c) {
  const at::ScalarType dtype = x.scalar_type();
  const at::Tensor g = r.to(dtype);
  Result want;
  want.y = at::linear(nv(x, false, dtype), nv(w, c.two_d, dtype), b.to(dtype));
  // Backward: grad_input's cast first (offset 0), then grad_weight's (offset 1).
  want.gx = nv_rounded(g, false, c.stochastic, 0, dtype).mm(nv(w.t(), c.two_d, dtype).t());
  want.gw = nv_rounded(g.t(), c.rht, c.stochastic, 1, dtype)
                .mm(nv_rounded(x.t(), c.rht, false, 0, dtype).t())
                .to(at::kFloat);
  want.gb = g.sum(0, false, at::kFloat);
  return want;
}

void expect_same(const Result& got, const Result& want) {
  EXPECT_TRUE(bitwise_equal(got.y, want.y)) << "forward";
  EXPECT_TRUE(bitwise_equal(got.gx, want.gx)) << "grad_input";
  EXPECT_TRUE(bitwise_equal(got.gw, want.gw)) << "grad_weight";
  EXPECT_TRUE(bitwise_equal(got.gb, want.gb)) << "grad_bias";
}

TEST(Fp4LinearTest, Nvfp4MatchesTheRecipeBuiltFromTheOpsBitForBit) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const Case c : {Case{}, Case{false, true, true}, Case{true, false, true},
                         Case{true, true, false}, Case{false, false, false}}) {
      SCOPED_TRACE(::testing::Message() << dtype << " rht " << c.rht << " stochastic "
                                        << c.stochastic << " 2d " << c.two_d);
      torch::manual_seed(3);
      fp8::Linear lin(fp8::LinearOptions(kIn, kOut));
      fp8::Recipe recipe(fp8::RecipeOptions()
                             .scaling(fp8::Scaling::kNvfp4)
                             .seed(kSeed)
                             .disable_rht(!c.rht)
                             .disable_stochastic_rounding(!c.stochastic)
                             .disable_2d_quantization(!c.two_d));
      const at::Tensor x = wide(kBatch, kIn, 6).to(dtype);
      const at::Tensor r = wide(kBatch, kOut, 6) * 1e-3;
      const Result got = run(lin, recipe, x, r);
      // The float32 weight is cast, as fp8::Linear casts its parameter.
      expect_same(got, reference_nvfp4(x, lin->weight.detach(), lin->bias.detach(), r, c));
      EXPECT_FALSE(got.y.equal(at::linear(x, lin->weight.detach().to(dtype),
                                          lin->bias.detach().to(dtype))));
    }
  }
}

TEST(Fp4LinearTest, TheRhtChangesTheWeightGradientsCastButNotWhatItEstimates) {
  // (g H)(x H)^T = g x^T: with and without the RHT, grad_weight is near the fp32 one; the two
  // differ bit for bit (the RHT ran) and neither is far off.
  torch::manual_seed(5);
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut));
  const at::Tensor x = torch::randn({kBatch, kIn});
  const at::Tensor r = torch::randn({kBatch, kOut});
  const at::Tensor exact = r.t().mm(x);
  double errors[2];
  at::Tensor grads[2];
  for (int rht = 0; rht < 2; ++rht) {
    fp8::Recipe recipe(fp8::RecipeOptions()
                           .scaling(fp8::Scaling::kNvfp4)
                           .disable_rht(rht == 0)
                           .disable_stochastic_rounding(true));
    grads[rht] = run(lin, recipe, x, r).gw;
    errors[rht] = ((grads[rht] - exact).norm() / exact.norm()).item<double>();
  }
  EXPECT_FALSE(grads[0].equal(grads[1]));
  EXPECT_LT(errors[1], 0.2) << "with the RHT";
  EXPECT_LT(errors[0], 0.2) << "without the RHT";
}

TEST(Fp4LinearTest, Nvfp4ForwardGemmFollowsTesAlphaFormula) {
  // TE's GEMM: sum_k (e2m1_x * s_x)(e2m1_w * s_w) * alpha, alpha = A_x A_w / (6^2 448^2) (TE's
  // reference_nvfp4.py). The dequantize-then-matmul emulation is that within float32 rounding.
  torch::manual_seed(7);
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut).bias(false));
  fp8::Recipe recipe(fp8::RecipeOptions().scaling(fp8::Scaling::kNvfp4));
  const at::Tensor x = wide(kBatch, kIn, 4);
  const at::Tensor y = run(lin, recipe, x, torch::zeros({kBatch, kOut})).y;
  const fp4::Nvfp4Tensor qx = fp4::quantize_nvfp4(x), qw = fp4::quantize_nvfp4(lin->weight, true);
  // E2M1 codes by their definition, unpacked (even element low), and the E4M3 scales' values.
  const double table[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const auto decode = [&](const at::Tensor& packed) {
    const at::Tensor p = packed.view(at::kByte).to(at::kInt);
    const at::Tensor codes = at::stack({p.bitwise_and(15), p.bitwise_right_shift(4)}, -1)
                                 .reshape({packed.size(0), -1});
    const at::Tensor magnitude = at::tensor(at::ArrayRef<double>(table, 8), at::kDouble)
                                     .index({codes.bitwise_and(7).to(at::kLong)});
    return at::where(codes.ge(8), -magnitude, magnitude);
  };
  const auto scaled = [&](const fp4::Nvfp4Tensor& q) {
    return decode(q.data) * q.block_scales.to(at::kDouble).repeat_interleave(16, 1);
  };
  const double alpha =
      qx.amax.item<double>() * qw.amax.item<double>() / (6.0 * 6.0 * 448.0 * 448.0);
  const at::Tensor want = scaled(qx).mm(scaled(qw).t()) * alpha;
  const double scale = want.abs().max().item<double>();
  EXPECT_LT((y.to(at::kDouble) - want).abs().max().item<double>(), 1e-5 * scale);
}

TEST(Fp4LinearTest, StochasticRoundingIsReproducibleFromTheSeed) {
  torch::manual_seed(9);
  fp8::Linear lin(fp8::LinearOptions(kIn, kOut));
  const at::Tensor x = torch::randn({kBatch, kIn}), r = torch::randn({kBatch, kOut});
  const auto grads = [&](std::uint64_t seed) {
    fp8::Recipe recipe(fp8::RecipeOptions().scaling(fp8::Scaling::kNvfp4).seed(seed));
    return run(lin, recipe, x, r);
  };
  const Result a = grads(1), b = grads(1), c = grads(2);
  EXPECT_TRUE(bitwise_equal(a.gx, b.gx));
  EXPECT_TRUE(bitwise_equal(a.gw, b.gw));
  EXPECT_FALSE(a.gx.equal(c.gx));
  EXPECT_FALSE(a.gw.equal(c.gw));
  EXPECT_TRUE(bitwise_equal(a.y, c.y));  // forward rounds to nearest
}

TEST(Fp4LinearTest, Mxfp4MatchesTheOpsBitForBit) {
  for (const fp4::MxScaleMode mode : {fp4::MxScaleMode::kFloor, fp4::MxScaleMode::kRceil}) {
    SCOPED_TRACE(mode == fp4::MxScaleMode::kFloor ? "FLOOR" : "RCEIL");
    torch::manual_seed(13);
    fp8::Linear lin(fp8::LinearOptions(kIn, kOut));
    fp8::Recipe recipe(fp8::RecipeOptions().scaling(fp8::Scaling::kMxfp4).mx_scale_mode(mode));
    const at::Tensor x = wide(kBatch, kIn, 6);
    const at::Tensor r = wide(kBatch, kOut, 6) * 1e-3;
    const Result got = run(lin, recipe, x, r);
    const auto mx = [&](const at::Tensor& t) {
      return fp4::dequantize_mxfp4(fp4::quantize_mxfp4(t, mode), at::kFloat);
    };
    const at::Tensor w = lin->weight.detach(), b = lin->bias.detach();
    Result want;
    want.y = at::linear(mx(x), mx(w), b);
    want.gx = mx(r).mm(mx(w.t()).t());
    want.gw = mx(r.t()).mm(mx(x.t()).t());
    want.gb = r.sum(0);
    expect_same(got, want);
  }
}

TEST(Fp4LinearTest, ShapesThatAreNotWholeBlocksAreRefusedWithTheOpsMessage) {
  fp8::Linear lin(fp8::LinearOptions(24, kOut));
  fp8::Recipe recipe(fp8::RecipeOptions().scaling(fp8::Scaling::kNvfp4));
  fp8::Autocast scope(recipe);
  try {
    lin->forward(torch::randn({kBatch, 24}));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be a multiple of 16"), std::string::npos) << e.what();
  }
}

TEST(Fp4LinearTest, DocsExample) {
  // docs/fp4.md's training example (an excerpt of these lines).
  torch::manual_seed(17);
  fp8::Linear model(fp8::LinearOptions(kIn, kOut));
  const at::Tensor x = torch::randn({kBatch, kIn}), y = torch::randn({kBatch, kOut});
  at::Tensor loss;
  mixprec::fp8::Recipe recipe(mixprec::fp8::RecipeOptions().scaling(mixprec::fp8::Scaling::kNvfp4));
  {
    mixprec::fp8::Autocast fp4(recipe);
    loss = torch::mse_loss(model->forward(x), y);
  }
  loss.backward();
  EXPECT_TRUE(model->weight.grad().defined());
  EXPECT_GT(model->weight.grad().abs().sum().item<double>(), 0.0);
}

}  // namespace
