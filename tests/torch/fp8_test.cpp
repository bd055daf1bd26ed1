// mixprec::fp8's functional ops (api.md), MXFP8 and the recipe scope against PyTorch 2.x's own
// float8 casts, bit for bit: the chain x.to(float).mul(scale).clamp(-max, max).to(fp8) over every
// fp8 code, the midpoints between adjacent codes (ties), -0, the edge of saturation, inf, NaN,
// float subnormals, random values over 80 binades and random float32 bit patterns.
// Compiled only with LibTorch >= 2.1 (tests/torch/CMakeLists.txt: MIXPREC_WITH_FP8).
#include "mixprec/fp8.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "torch/fp8_reference.h"
#include "torch/test_util.h"

namespace {

namespace fp8 = mixprec::fp8;
using fp8_ref::bitwise_equal;

const at::ScalarType kFp8[] = {at::kFloat8_e4m3fn, at::kFloat8_e5m2};
const at::ScalarType kInputs[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

/// Values v (float64) whose v * scale is each interesting point of `fp8`: every code, the
/// midpoints of adjacent codes (exact ties when scale is a power of two) and a hair either side,
/// the edge of saturation (max, c10's NaN threshold 480 of E4M3, beyond), +-0, +-inf, NaN, float
/// subnormals, then 4096 random values over 2^-40..2^40, shuffled.
at::Tensor interesting_values(at::ScalarType fp8_dtype, double scale) {
  const at::Tensor codes =
      torch::arange(256, torch::kInt).to(torch::kByte).view(fp8_dtype).to(torch::kDouble);
  const at::Tensor finite = codes.index({at::isfinite(codes).logical_and(codes.ge(0))});
  const at::Tensor sorted = std::get<0>(at::unique_consecutive(std::get<0>(finite.sort())));
  const at::Tensor mids =
      (sorted.narrow(0, 0, sorted.size(0) - 1) + sorted.narrow(0, 1, sorted.size(0) - 1)) / 2;
  const double m = fp8_ref::fp8_max(fp8_dtype);
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor edges =
      torch::tensor({0.0, m, std::nextafter(m, inf), (m + 480.0) / 2, 479.99, 480.0, 481.0, m * 1.5,
                     65504.0, 65520.0, 1e5, 1e30, 3.4e38, 1e300, inf,
                     std::numeric_limits<double>::quiet_NaN(), 1e-40, 1e-45, 1e-300},
                    torch::kDouble);
  const at::Tensor random = at::exp2(torch::rand({4096}, torch::kDouble) * 80 - 40) *
                            (1 + torch::rand({4096}, torch::kDouble));
  at::Tensor v = torch::cat({codes.index({at::isfinite(codes)}), mids, mids * (1 + 1e-6),
                             mids * (1 - 1e-6), edges, random});
  v = torch::cat({v, -v}).div(scale);
  return v.index({torch::randperm(v.size(0), torch::kLong)});
}

const double kScales[] = {1.0,  0.5,       0x1p-10, 0x1p10,
                          0.3,  448 / 3.7, 1e-30,   1e-40,
                          1e30, 3e38,      0.0,     std::numeric_limits<double>::infinity()};

TEST(Fp8Test, QuantizeIsPyTorchsSaturatingCastBitForBit) {
  torch::manual_seed(0);
  for (const at::ScalarType fp8_dtype : kFp8) {
    for (const double s : kScales) {
      const at::Tensor scale = torch::full({1}, s, torch::kFloat);
      const at::Tensor values = interesting_values(fp8_dtype, s);
      for (const at::ScalarType dtype : kInputs) {
        const at::Tensor x = values.to(dtype);
        const at::Tensor q = fp8::quantize(x, scale, fp8_dtype);
        ASSERT_EQ(q.scalar_type(), fp8_dtype);
        EXPECT_TRUE(bitwise_equal(q, fp8_ref::quantize(x, scale, fp8_dtype)))
            << fp8_dtype << " from " << dtype << ", scale " << s;
      }
    }
  }
}

TEST(Fp8Test, QuantizeRandomFloatBitPatternsIncludingNaNPayloads) {
  // Every float32 class: NaNs of both signs with payloads, infs, subnormals. PyTorch 2.6 keeps a
  // NaN's sign through mul, clamp and its cast (0x7f / 0xff) on its vector and scalar paths
  // alike (checked here with odd lengths), so NaNs are compared bit for bit too.
  torch::manual_seed(1);
  for (const std::int64_t n : {1, 7, 31, 4097, 100003}) {
    const at::Tensor x = torch::randint(std::numeric_limits<std::int32_t>::min(),
                                        std::numeric_limits<std::int32_t>::max(), {n}, torch::kInt)
                             .view(torch::kFloat);
    for (const at::ScalarType fp8_dtype : kFp8) {
      for (const double s : {1.0, 0x1p-100, 0x1p100}) {
        const at::Tensor scale = torch::full({1}, s, torch::kFloat);
        EXPECT_TRUE(bitwise_equal(fp8::quantize(x, scale, fp8_dtype),
                                  fp8_ref::quantize(x, scale, fp8_dtype)))
            << fp8_dtype << " n " << n << " scale " << s;
      }
    }
  }
}

TEST(Fp8Test, QuantizeNonContiguousInputs) {
  torch::manual_seed(2);
  const at::Tensor base = torch::randn({37, 66}, torch::kFloat) * 300;
  const at::Tensor scale = torch::full({1}, 0.75f);
  const std::vector<at::Tensor> views = {base.t(),
                                         base.narrow(1, 3, 40),
                                         base.slice(0, 0, 37, 3),
                                         base.select(1, 5),
                                         base.narrow(0, 1, 1).expand({5, 66}),
                                         base.unsqueeze(0).permute({2, 0, 1})};
  for (const at::ScalarType fp8_dtype : kFp8) {
    for (const at::Tensor& v : views) {
      for (const at::ScalarType dtype : kInputs) {
        const at::Tensor x = v.to(dtype);  // keeps v's strides
        const at::Tensor q = fp8::quantize(x, scale, fp8_dtype);
        EXPECT_EQ(q.sizes(), x.sizes());
        EXPECT_TRUE(bitwise_equal(q, fp8_ref::quantize(x, scale, fp8_dtype))) << x.strides();
      }
    }
  }
  // An empty tensor and a 0-dim one.
  EXPECT_EQ(fp8::quantize(torch::empty({0, 3}), scale, at::kFloat8_e4m3fn).sizes(),
            (std::vector<std::int64_t>{0, 3}));
  const at::Tensor zero_dim = torch::full({}, 3.3f);
  EXPECT_TRUE(bitwise_equal(fp8::quantize(zero_dim, scale, at::kFloat8_e5m2),
                            fp8_ref::quantize(zero_dim, scale.squeeze(), at::kFloat8_e5m2)));
}

TEST(Fp8Test, DequantizeEveryCodeBitForBit) {
  const at::Tensor all = torch::arange(256, torch::kInt).to(torch::kByte);
  for (const at::ScalarType fp8_dtype : kFp8) {
    const at::Tensor q = all.view(fp8_dtype);
    for (const float s : {1.0f, 0.5f, 1.0f / 3.0f, 1e-30f, 3e38f, 7.25f, 1e-40f}) {
      const at::Tensor scale_inv = torch::full({1}, s);
      for (const at::ScalarType out : kInputs) {
        // PyTorch decodes the E4M3 NaN codes to a NaN with payload 0x700000, the core to the
        // default quiet NaN (0x7fc00000): NaNs compared as NaN (of the same codes, the sign).
        EXPECT_TRUE(bitwise_equal(fp8::dequantize(q, scale_inv, out),
                                  fp8_ref::dequantize(q, scale_inv, out), /*nan_any_bits=*/true))
            << fp8_dtype << " to " << out << " scale_inv " << s;
      }
    }
    // Round trip of a non-contiguous q.
    const at::Tensor grid = q.view({16, 16}).t();
    EXPECT_TRUE(bitwise_equal(fp8::dequantize(grid, torch::ones({1}), at::kFloat),
                              fp8_ref::dequantize(grid, torch::ones({1}), at::kFloat), true));
  }
}

TEST(Fp8Test, AmaxIsAbsMax) {
  torch::manual_seed(3);
  for (const at::ScalarType dtype : kInputs) {
    for (const std::int64_t n : {1, 5, 33, 1000, 65537}) {
      at::Tensor x = (torch::randn({n}, torch::kDouble) * 1000).to(dtype);
      const at::Tensor a = fp8::amax(x);
      ASSERT_EQ(a.scalar_type(), at::kFloat);
      ASSERT_EQ(a.numel(), 1);
      EXPECT_TRUE(bitwise_equal(a, x.abs().max().to(at::kFloat))) << dtype << " " << n;
      x[n / 2] = -std::numeric_limits<double>::infinity();
      EXPECT_EQ(fp8::amax(x).item<float>(), std::numeric_limits<float>::infinity());
      x[n - 1] = std::numeric_limits<double>::quiet_NaN();
      EXPECT_TRUE(std::isnan(fp8::amax(x).item<float>()));
      EXPECT_TRUE(std::isnan(x.abs().max().item<double>()));  // PyTorch agrees
    }
    EXPECT_EQ(fp8::amax(torch::zeros({0}, dtype)).item<float>(), 0.0f);
    // -0 has magnitude 0; a non-contiguous view.
    EXPECT_EQ(fp8::amax(torch::full({3}, -0.0, dtype)).item<float>(), 0.0f);
    const at::Tensor m = (torch::randn({20, 30}, torch::kDouble)).to(dtype);
    EXPECT_TRUE(bitwise_equal(fp8::amax(m.t().narrow(0, 2, 9)),
                              m.t().narrow(0, 2, 9).abs().max().to(at::kFloat)));
  }
}

TEST(Fp8Test, QuantizeAndRecordAmaxAccumulatesIntoTheSlot) {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({300}) * 7;
  const at::Tensor scale = torch::full({1}, 30.0f);
  at::Tensor history = torch::zeros({4, 3});
  history[0][1] = 2.0f;  // an earlier cast of this iteration, below this one's amax
  const at::Tensor q = fp8::quantize_and_record_amax(x, scale, at::kFloat8_e4m3fn, history[0][1]);
  EXPECT_TRUE(bitwise_equal(q, fp8_ref::quantize(x, scale, at::kFloat8_e4m3fn)));
  EXPECT_EQ(history[0][1].item<float>(), x.abs().max().item<float>());
  EXPECT_EQ(history.sum().item<float>(), x.abs().max().item<float>());  // nothing else written
  // A larger amax already there stays.
  history[0][1] = 1e6f;
  fp8::quantize_and_record_amax(x, scale, at::kFloat8_e5m2, history[0][1]);
  EXPECT_EQ(history[0][1].item<float>(), 1e6f);
  // NaN propagates into the slot.
  at::Tensor with_nan = x.clone();
  with_nan[17] = std::numeric_limits<float>::quiet_NaN();
  fp8::quantize_and_record_amax(with_nan, scale, at::kFloat8_e5m2, history[0][1]);
  EXPECT_TRUE(std::isnan(history[0][1].item<float>()));
  // TE's recording (NanAmax::kIgnore) leaves the NaN out; the codes are the same.
  history[0][1] = 0.0f;
  const at::Tensor q_ignore = fp8::quantize_and_record_amax(
      with_nan, scale, at::kFloat8_e5m2, history[0][1], fp8::NanAmax::kIgnore);
  EXPECT_EQ(history[0][1].item<float>(), with_nan.nan_to_num(0.0).abs().max().item<float>());
  EXPECT_TRUE(bitwise_equal(q_ignore, fp8_ref::quantize(with_nan, scale, at::kFloat8_e5m2),
                            /*nan_any_bits=*/false));
}

TEST(Fp8Test, ArgumentErrors) {
  const at::Tensor x = torch::randn({4});
  const at::Tensor one = torch::ones({1});
  EXPECT_THROW_WITH(fp8::quantize(x, one, at::kHalf), "expected Float8_e4m3fn or Float8_e5m2");
  EXPECT_THROW_WITH(fp8::quantize(x, torch::ones({2}), at::kFloat8_e4m3fn),
                    "scale must be a 1-element tensor");
  EXPECT_THROW_WITH(fp8::quantize(x, torch::ones({1}, torch::kDouble), at::kFloat8_e4m3fn),
                    "scale must be a float tensor");
  EXPECT_THROW_WITH(fp8::quantize(x, at::Tensor(), at::kFloat8_e4m3fn), "scale must be a defined");
  EXPECT_THROW_WITH(
      fp8::quantize(x, torch::ones({1}, torch::Device(torch::kMeta)), at::kFloat8_e4m3fn),
      "Expected all tensors to be on the same device");
  EXPECT_THROW_WITH(fp8::quantize(torch::ones({3}, torch::kInt), one, at::kFloat8_e4m3fn),
                    "expected a float32, float64, float16 or bfloat16 tensor, got Int");
  EXPECT_THROW_WITH(fp8::dequantize(x, one, at::kFloat), "expected Float8_e4m3fn or Float8_e5m2");
  const at::Tensor q = fp8::quantize(x, one, at::kFloat8_e4m3fn);
  EXPECT_THROW_WITH(fp8::dequantize(q, torch::ones({3}), at::kFloat),
                    "scale_inv must be a 1-element");
  EXPECT_THROW_WITH(fp8::dequantize(q, one, at::kLong), "expected a float32");
  EXPECT_THROW_WITH(fp8::amax(torch::ones({2}, torch::kLong)), "fp8::amax: expected a float32");
  EXPECT_THROW_WITH(fp8::quantize_and_record_amax(x, one, at::kFloat8_e4m3fn, torch::zeros({2})),
                    "amax_slot must be a 1-element tensor");
  EXPECT_THROW_WITH(fp8::quantize_mxfp8(torch::ones({})), "at least one dimension");
  fp8::MxTensor mx = fp8::quantize_mxfp8(torch::ones({2, 40}));
  mx.scales = mx.scales.narrow(1, 0, 1);
  EXPECT_THROW_WITH(fp8::dequantize_mxfp8(mx, at::kFloat), "do not fit data of shape");
}

// ---- MXFP8 ---------------------------------------------------------------------------------

/// Rows that give each kind of block: random over many binades, all zero, tiny (float
/// subnormal amax), huge (amax near FLT_MAX; inf in fp16), one inf, one NaN, all at fp8_max
/// (no rounding up), -0.
at::Tensor mx_input(std::int64_t rows, std::int64_t cols) {
  at::Tensor x = at::exp2(torch::rand({rows, cols}, torch::kDouble) * 40 - 20) *
                 torch::randn({rows, cols}, torch::kDouble);
  if (rows >= 8) {
    x[1].zero_();
    x[2].mul_(1e-300).add_(1e-41);
    x[3].mul_(1e-20).add_(3e38);
    x[4][0] = std::numeric_limits<double>::infinity();
    x[5][cols - 1] = std::numeric_limits<double>::quiet_NaN();
    x[6].fill_(448.0);
    x[7].fill_(-0.0);
  }
  return x;
}

TEST(Fp8Test, Mxfp8MatchesBlocksBuiltFromPyTorchOps) {
  torch::manual_seed(5);
  const std::vector<std::vector<std::int64_t>> shapes = {{8, 70}, {9, 64},    {8, 32},
                                                         {8, 1},  {2, 5, 96}, {8, 33}};
  for (const auto& shape : shapes) {
    const std::int64_t cols = shape.back();
    const at::Tensor base = mx_input(c10::multiply_integers(shape) / cols, cols).view(shape);
    for (const at::ScalarType fp8_dtype : kFp8) {
      for (const at::ScalarType dtype : kInputs) {
        const at::Tensor x = base.to(dtype);
        const fp8::MxTensor q = fp8::quantize_mxfp8(x, fp8_dtype);
        const fp8_ref::Mx ref = fp8_ref::quantize_mx(x, fp8_dtype);
        EXPECT_TRUE(bitwise_equal(q.scales, ref.scales)) << fp8_dtype << " " << dtype;
        // A NaN block scale makes every element of the block NaN; which NaN (sign) is not
        // specified: compared as NaN. Everything else bit for bit.
        EXPECT_TRUE(bitwise_equal(q.data, ref.data, /*nan_any_bits=*/true))
            << fp8_dtype << " " << dtype << " " << x.sizes();
        const at::Tensor finite_rows = ref.scales.ne(255);
        EXPECT_TRUE(bitwise_equal(q.data.view(at::kByte).index({finite_rows.all(-1)}),
                                  ref.data.view(at::kByte).index({finite_rows.all(-1)})));
        for (const at::ScalarType out : kInputs) {
          EXPECT_TRUE(bitwise_equal(fp8::dequantize_mxfp8(q, out), fp8_ref::dequantize_mx(ref, out),
                                    /*nan_any_bits=*/true))
              << fp8_dtype << " from " << dtype << " to " << out;
        }
      }
    }
  }
  // Non-contiguous input: blocks still run along the logical last dimension.
  const at::Tensor t = mx_input(8, 70).to(at::kFloat).t();
  EXPECT_TRUE(bitwise_equal(fp8::quantize_mxfp8(t).scales,
                            fp8_ref::quantize_mx(t, at::kFloat8_e4m3fn).scales));
}

TEST(Fp8Test, Mxfp8ScaleRule) {
  // TE's value = amax * (1 / fp8_max in float), rounded up to a power of two. 1/448 in float is
  // a hair above 1/448, but 448 times it rounds to exactly 1 in float: amax 448 * 2^k gets
  // scale 2^k (no saturation, no needless halving); a hair above gets 2^(k+1);
  // 1 -> 2^-8.8 -> 2^-8; 0 -> 2^-127 (byte 0).
  const at::Tensor x = torch::tensor({448.0f, 448.0f * 1.0001f, 0.0f, 3584.0f, 1.0f}).view({5, 1});
  const at::Tensor got = fp8::quantize_mxfp8(x).scales.flatten().to(at::kInt);
  const std::vector<int> expected = {127, 128, 0, 130, 127 - 8};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i].item<int>(), expected[static_cast<size_t>(i)]) << i;
  const fp8::MxTensor q = fp8::quantize_mxfp8(x);
  EXPECT_EQ(q.data[0][0].to(at::kFloat).item<float>(), 448.0f);  // not saturated, not halved
}

TEST(Fp8Test, Mxfp8BlockHoldingNaN) {
  // torchao's to_mx (kPropagate, the op's default): the NaN makes the block's scale NaN and every
  // element NaN. TE (kIgnore): the block scale of the other elements; only the NaN stays NaN.
  at::Tensor x = torch::linspace(1, 32, 32).view({1, 32});
  x[0][5] = std::nanf("");
  const fp8::MxTensor whole = fp8::quantize_mxfp8(x);
  EXPECT_EQ(whole.scales[0][0].item<int>(), 255);
  EXPECT_TRUE(fp8::dequantize_mxfp8(whole, at::kFloat).isnan().all().item<bool>());
  const fp8::MxTensor te = fp8::quantize_mxfp8(x, at::kFloat8_e4m3fn, fp8::NanAmax::kIgnore);
  const at::Tensor clean = x.nan_to_num(0.0);
  EXPECT_TRUE(bitwise_equal(te.scales, fp8::quantize_mxfp8(clean).scales));
  const at::Tensor back = fp8::dequantize_mxfp8(te, at::kFloat);
  EXPECT_EQ(back.isnan().sum().item<int>(), 1);
  EXPECT_TRUE(std::isnan(back[0][5].item<float>()));
  const at::Tensor others = torch::cat({back.narrow(1, 0, 5), back.narrow(1, 6, 26)}, 1);
  const at::Tensor want = fp8::dequantize_mxfp8(fp8::quantize_mxfp8(clean), at::kFloat);
  EXPECT_TRUE(bitwise_equal(others, torch::cat({want.narrow(1, 0, 5), want.narrow(1, 6, 26)}, 1)));
}

// ---- Recipe options and the scope ----------------------------------------------------------

TEST(Fp8RecipeTest, DefaultsAreTransformerEngines) {
  const fp8::Recipe recipe;
  EXPECT_EQ(recipe.options().scaling(), fp8::Scaling::kDelayed);
  EXPECT_EQ(recipe.options().format(), fp8::Format::kHybrid);
  EXPECT_EQ(recipe.options().margin(), 0);
  EXPECT_EQ(recipe.options().amax_history_len(), 1024);
  EXPECT_EQ(recipe.options().amax_compute_algo(), fp8::AmaxAlgo::kMax);
  EXPECT_EQ(recipe.options().eps(), 1e-12);
  EXPECT_FALSE(recipe.options().power_of_2_scales());
  EXPECT_EQ(recipe.options().nan_amax(), fp8::NanAmax::kIgnore);  // TE's kernels' fmaxf
  const fp8::Recipe copy = recipe;  // copies share the state
  EXPECT_EQ(copy.state(), recipe.state());
}

TEST(Fp8RecipeTest, InvalidOptionsThrow) {
  using fp8::RecipeOptions;
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().amax_history_len(0)),
                    "amax_history_len must be >= 1, got 0");
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().eps(0)), "eps must be finite and > 0");
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().eps(-1)), "eps must be finite and > 0");
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().eps(1e-60)), "eps must be finite and > 0");
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().eps(std::nan(""))), "eps must be finite");
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().margin(128)), "margin must be in [-126, 127]");
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().margin(-127)), "got -127");
  EXPECT_THROW_WITH(fp8::Recipe(RecipeOptions().margin(-200)), "got -200");
  EXPECT_NO_THROW(fp8::Recipe(RecipeOptions().margin(-126).amax_history_len(1).eps(1e-30)));
  EXPECT_NO_THROW(fp8::Recipe(RecipeOptions().margin(127)));  // the core's range (2^127 normal)
}

TEST(Fp8RecipeTest, AutocastNestsPerThread) {
  fp8::Recipe outer, inner;
  EXPECT_EQ(fp8::Autocast::current(), nullptr);
  {
    fp8::Autocast a(outer);
    EXPECT_EQ(fp8::Autocast::current(), &outer);
    {
      fp8::Autocast b(inner);
      EXPECT_EQ(fp8::Autocast::current(), &inner);
      fp8::Recipe* seen = &inner;
      std::thread([&] { seen = fp8::Autocast::current(); }).join();
      EXPECT_EQ(seen, nullptr);  // another thread is outside every scope
    }
    EXPECT_EQ(fp8::Autocast::current(), &outer);
  }
  EXPECT_EQ(fp8::Autocast::current(), nullptr);
}

TEST(Fp8RecipeTest, UpdateWithNothingCastDoesNothing) {
  fp8::Recipe recipe;
  int calls = 0;
  recipe.set_amax_reduction([&](at::Tensor&) { ++calls; });
  recipe.update();
  { fp8::Autocast scope(recipe); }
  EXPECT_EQ(calls, 0);  // no collective for an iteration without casts
}

}  // namespace
