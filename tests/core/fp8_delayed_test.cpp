// delayed_scaling_update_ against Transformer Engine's fused kernel, written out here from
// transformer_engine/common/recipe/delayed_scaling.cu (kernel_bulk), not through
// src/core/fp8_ops.h; and the FP8 kernels' argument checks at the dispatch point
// (src/core/kernels.cpp): each bad call throws core::Error naming the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "message_of.h"
#include "mixprec/core/error.h"
#include "mixprec/core/fp8.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One tensor's state under TE's rule.
struct TeState {
  std::vector<float> history;  // amax_history[:, i]: slot 0 is this iteration's
  float scale = 1.0f;
  float scale_inv = 1.0f;
};

// TE's fused kernel, once per iteration: last = history[0]; when last is 0 nothing changes (no
// roll, the same scale). Else amax = fmaxf over the history from 0 ("max": NaN slots skipped; or
// NaN-propagating as torch.max when `propagate`, NanAmax::kPropagate) or last ("most_recent");
// the roll (h[i] = h[i + 1], the last slot takes last, h[0] = 0); sf = scaled_max / amax with
// scaled_max = fp8_max * 2^-margin, kept at the old scale where amax <= 0 or is not finite, and
// FLT_MAX where infinite; scale_inv = 1 / scale.
void te_update(TeState& s, float fp8_max, int margin, bool most_recent, bool propagate) {
  std::vector<float>& h = s.history;
  const float last = h[0];
  if (last == 0.0f) return;
  float amax = 0.0f;
  for (float v : h) {
    amax = propagate ? ((std::isnan(amax) || std::isnan(v)) ? kNaN : std::max(amax, v))
                     : std::fmax(amax, v);
  }
  if (most_recent) amax = last;
  std::rotate(h.begin(), h.begin() + 1, h.end());  // h[i] = h[i + 1], the last slot takes last
  h[0] = 0.0f;
  const float scaled_max = fp8_max * std::pow(2.0f, static_cast<float>(-margin));
  float sf = scaled_max / amax;
  if (!(amax > 0.0f)) sf = s.scale;
  if (!std::isfinite(amax)) sf = s.scale;
  if (std::isinf(sf)) sf = FLT_MAX;
  s.scale = sf;
  s.scale_inv = 1.0f / sf;
}

void expect_same(float got, float want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else {
    EXPECT_EQ(got, want) << what;
  }
}

// Runs `iterations` of record-then-update for `tensors` tensors interleaved in one buffer (TE's
// [history_len, num_tensors] layout: stride = tensors), against te_update on each.
void run_delayed(std::int64_t history_len, int tensors, AmaxAlgo algo, int margin,
                 const std::vector<float>& amaxes, unsigned seed, NanAmax nan) {
  std::mt19937 rng(seed);
  DelayedScaling rule;
  rule.history_len = history_len;
  rule.algo = algo;
  rule.margin = margin;
  rule.nan = nan;
  std::vector<float> buffer(static_cast<std::size_t>(history_len * tensors), 0.0f);
  std::vector<float> scales(static_cast<std::size_t>(tensors), 1.0f), inverses(scales);
  std::vector<DelayedTensor> views(static_cast<std::size_t>(tensors));
  std::vector<TeState> te(static_cast<std::size_t>(tensors));
  for (int t = 0; t < tensors; ++t) {
    views[t] = {buffer.data() + t, tensors, &scales[t], &inverses[t],
                t % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3};
    te[t].history.assign(static_cast<std::size_t>(history_len), 0.0f);
  }
  for (std::size_t it = 0; it < amaxes.size() * 3; ++it) {
    for (int t = 0; t < tensors; ++t) {  // this iteration's casts record into slot 0
      const float a = amaxes[(it + static_cast<std::size_t>(t) + rng() % 2) % amaxes.size()];
      buffer[static_cast<std::size_t>(t)] = a;
      te[t].history[0] = a;
    }
    delayed_scaling_update_(views.data(), views.size(), rule);
    for (int t = 0; t < tensors; ++t) {
      te_update(te[t], t % 2 ? 57344.0f : 448.0f, margin, algo == AmaxAlgo::kMostRecent,
                nan == NanAmax::kPropagate);
      const std::string what = "len " + std::to_string(history_len) + " tensor " +
                               std::to_string(t) + " iteration " + std::to_string(it) + " margin " +
                               std::to_string(margin) + " nan " + std::to_string(int(nan));
      expect_same(scales[t], te[t].scale, what + " scale");
      expect_same(inverses[t], te[t].scale_inv, what + " scale_inv");
      for (std::int64_t i = 0; i < history_len; ++i) {
        expect_same(buffer[static_cast<std::size_t>(i * tensors + t)],
                    te[t].history[static_cast<std::size_t>(i)],
                    what + " slot " + std::to_string(i));
      }
    }
  }
}

// Ordinary amaxes, and the ones that keep the old scale (0, inf, NaN) or overflow it (tiny).
const std::vector<float> kAmaxes = {3.0f, 10.0f, 0.5f,   0.0f, 7.25f, kInf,
                                    1.0f, kNaN,  1e-45f, 2.0f, 1e-3f, 300.0f};

TEST(Fp8DelayedTest, MaxAlgoMatchesTransformerEnginesFusedKernel) {
  for (NanAmax nan : {NanAmax::kIgnore, NanAmax::kPropagate}) {
    for (std::int64_t len : {1, 2, 4, 16, 1024}) {
      for (int margin : {0, 2, -1}) run_delayed(len, 3, AmaxAlgo::kMax, margin, kAmaxes, 1, nan);
    }
  }
}

TEST(Fp8DelayedTest, MostRecentAlgoMatchesTransformerEnginesFusedKernel) {
  for (NanAmax nan : {NanAmax::kIgnore, NanAmax::kPropagate}) {
    for (std::int64_t len : {1, 3, 1024}) {
      for (int margin : {0, 1}) {
        run_delayed(len, 2, AmaxAlgo::kMostRecent, margin, kAmaxes, 2, nan);
      }
    }
  }
}

// One NaN amax: skipped by the window's max (TE), or holding the scale for the whole window.
TEST(Fp8DelayedTest, ANanAmaxFreezesTheScaleForTheWindowOnlyWhenPropagated) {
  for (NanAmax nan : {NanAmax::kIgnore, NanAmax::kPropagate}) {
    std::vector<float> h(8, 0.0f);
    float scale = 1.0f, scale_inv = 1.0f;
    const DelayedTensor t{h.data(), 1, &scale, &scale_inv, Fp8Format::kE4M3};
    DelayedScaling rule;
    rule.history_len = 8;
    rule.nan = nan;
    h[0] = 2.0f;
    delayed_scaling_update_(&t, 1, rule);
    ASSERT_EQ(scale, 224.0f);
    h[0] = kNaN;
    delayed_scaling_update_(&t, 1, rule);
    EXPECT_EQ(scale, 224.0f) << "max(2, NaN): 2 or NaN, either keeps 224";
    h[0] = 1.0f;  // the 2 is still in the window
    delayed_scaling_update_(&t, 1, rule);
    EXPECT_EQ(scale, 224.0f);
    for (int i = 0; i < 6; ++i) {  // the 2 leaves the window; the NaN one update later
      h[0] = 1.0f;
      delayed_scaling_update_(&t, 1, rule);
    }
    EXPECT_EQ(scale, nan == NanAmax::kIgnore ? 448.0f : 224.0f)
        << "kIgnore: the window's max is 1 once the 2 has left; kPropagate: the NaN still in it";
    h[0] = 1.0f;
    delayed_scaling_update_(&t, 1, rule);
    EXPECT_EQ(scale, 448.0f) << "the NaN has left the window";
  }
}

// TE PR #825's fused kernel: a tensor whose slot 0 is 0 (cast, but only zeros) keeps its history
// and its scale; TE's unfused Python path would roll it.
TEST(Fp8DelayedTest, AZeroAmaxNeitherRollsNorRescales) {
  std::vector<float> h = {0.0f, 10.0f, 5.0f, 3.0f};
  float scale = 7.0f, scale_inv = 0.125f;
  const DelayedTensor t{h.data(), 1, &scale, &scale_inv, Fp8Format::kE4M3};
  DelayedScaling rule;
  rule.history_len = 4;
  delayed_scaling_update_(&t, 1, rule);
  EXPECT_EQ(h, (std::vector<float>{0.0f, 10.0f, 5.0f, 3.0f}));
  EXPECT_EQ(scale, 7.0f);
  EXPECT_EQ(scale_inv, 0.125f) << "left as it was, not recomputed";
}

// The fused kernel's (fp8_max * 2^-margin) / amax, one rounding, where TE's Python path,
// (fp8_max / amax) / 2^margin, overflows first: 448 / amax is inf, 112 / amax is finite.
TEST(Fp8DelayedTest, TheMarginScalesTheMaximumBeforeTheDivision) {
  const float amax = 448.0f / FLT_MAX * 0.75f;  // 448 / amax > FLT_MAX > 112 / amax
  ASSERT_TRUE(std::isinf(448.0f / amax));
  EXPECT_EQ(delayed_scale(amax, 1.0f, 448.0f, 2), 112.0f / amax);
  EXPECT_TRUE(std::isfinite(112.0f / amax));
  EXPECT_EQ(delayed_scale(amax, 1.0f, 448.0f, 0), FLT_MAX);
}

TEST(Fp8DelayedTest, WorkedExample) {
  // history [3, 10, 5, 0], E4M3, max: amax 10, scale 44.8; rolled to [0, 5, 0, 3].
  std::vector<float> h = {3.0f, 10.0f, 5.0f, 0.0f};
  float scale = 1.0f, scale_inv = 0.0f;
  const DelayedTensor t{h.data(), 1, &scale, &scale_inv, Fp8Format::kE4M3};
  DelayedScaling rule;
  rule.history_len = 4;
  delayed_scaling_update_(&t, 1, rule);
  EXPECT_EQ(scale, 448.0f / 10.0f);
  EXPECT_EQ(scale_inv, 1.0f / (448.0f / 10.0f));
  EXPECT_EQ(h, (std::vector<float>{0.0f, 5.0f, 0.0f, 3.0f}));
  // This iteration's amax 1: amax 5 (from the history), then [5, 0, 3, 1] with slot 0 zeroed.
  h[0] = 1.0f;
  delayed_scaling_update_(&t, 1, rule);
  EXPECT_EQ(scale, 448.0f / 5.0f);
  EXPECT_EQ(h, (std::vector<float>{0.0f, 0.0f, 3.0f, 1.0f}));
  h = {0.0f, 0.0f, 0.0f, 0.0f};
  delayed_scaling_update_(&t, 1, rule);
  EXPECT_EQ(scale, 448.0f / 5.0f) << "an all-zero history keeps the scale";
  delayed_scaling_update_(&t, 0, rule);  // no tensors: nothing to do
}

// ---- Argument checks -------------------------------------------------------------------------

TEST(Fp8ArgsTest, PerTensorCallsRefuseBadArguments) {
  std::vector<float> x(10, 1.0f);
  std::vector<std::uint8_t> q(10, 0x11);
  float amax = 0.0f, scale = 2.0f, scale_inv = 0.5f;
  const TensorView v{x.data(), 10, DType::kFloat32};
  const TensorView null_data{nullptr, 10, DType::kFloat32};
  const TensorView negative{x.data(), -1, DType::kFloat32};
  const TensorView bad_dtype{x.data(), 10, static_cast<DType>(9)};
  const auto bad_format = static_cast<Fp8Format>(5);
  const CurrentScaling rule;
  EXPECT_THROW_WITH(amax_(v, nullptr), "amax_: amax must not be null");
  EXPECT_THROW_WITH(amax_(null_data, &amax), "amax_: x has 10 elements but a null data pointer");
  EXPECT_THROW_WITH(amax_(negative, &amax), "amax_: x has a negative element count -1");
  EXPECT_THROW_WITH(amax_(bad_dtype, &amax), "amax_: x has an unsupported dtype (9)");
  EXPECT_THROW_WITH(quantize_fp8_(v, nullptr, Fp8Format::kE4M3, &scale),
                    "quantize_fp8_: q is null but x has 10");
  EXPECT_THROW_WITH(quantize_fp8_(v, q.data(), Fp8Format::kE4M3, nullptr),
                    "quantize_fp8_: scale must not be null");
  EXPECT_THROW_WITH(quantize_fp8_(v, q.data(), bad_format, &scale),
                    "quantize_fp8_: unsupported FP8 format 5");
  const auto bad_nan = static_cast<NanAmax>(2);
  EXPECT_THROW_WITH(amax_(v, &amax, nullptr, bad_nan), "amax_: unsupported NanAmax 2");
  EXPECT_THROW_WITH(quantize_fp8_(v, q.data(), Fp8Format::kE4M3, &scale, &amax, nullptr, bad_nan),
                    "quantize_fp8_: unsupported NanAmax 2");
  EXPECT_THROW_WITH(quantize_fp8_(bad_dtype, q.data(), Fp8Format::kE4M3, &scale),
                    "quantize_fp8_: x has an unsupported dtype");
  EXPECT_THROW_WITH(
      quantize_fp8_current_(v, q.data(), Fp8Format::kE4M3, rule, nullptr, &scale_inv, &amax),
      "quantize_fp8_current_: scale, scale_inv and amax must not be null");
  CurrentScaling bad_rule;
  bad_rule.nan = static_cast<NanAmax>(9);
  EXPECT_THROW_WITH(
      quantize_fp8_current_(v, q.data(), Fp8Format::kE4M3, bad_rule, &scale, &scale_inv, &amax),
      "quantize_fp8_current_: unsupported NanAmax 9");
  EXPECT_THROW_WITH(
      quantize_fp8_current_(v, q.data(), Fp8Format::kE4M3, rule, &scale, &scale_inv, nullptr),
      "quantize_fp8_current_: scale, scale_inv and amax must not be null");
  for (float eps : {-1.0f, kNaN, kInf}) {
    CurrentScaling bad;
    bad.eps = eps;
    EXPECT_THROW_WITH(
        quantize_fp8_current_(v, q.data(), Fp8Format::kE4M3, bad, &scale, &scale_inv, &amax),
        "quantize_fp8_current_: CurrentScaling::eps must be finite and >= 0");
  }
  EXPECT_THROW_WITH(dequantize_fp8_(q.data(), Fp8Format::kE4M3, nullptr, v),
                    "dequantize_fp8_: scale_inv must not be null");
  EXPECT_THROW_WITH(dequantize_fp8_(nullptr, Fp8Format::kE4M3, &scale_inv, v),
                    "dequantize_fp8_: q is null but out has 10");
  EXPECT_THROW_WITH(dequantize_fp8_(q.data(), bad_format, &scale_inv, v),
                    "dequantize_fp8_: unsupported FP8 format");
  EXPECT_THROW_WITH(dequantize_fp8_(q.data(), Fp8Format::kE4M3, &scale_inv, null_data),
                    "dequantize_fp8_: out has 10 elements but a null");
  // Refused calls wrote nothing.
  EXPECT_EQ(q, std::vector<std::uint8_t>(10, 0x11));
  EXPECT_EQ(x, std::vector<float>(10, 1.0f));
  EXPECT_EQ(amax, 0.0f);
  // Empty tensors need no data.
  EXPECT_NO_THROW(
      quantize_fp8_({nullptr, 0, DType::kFloat16}, nullptr, Fp8Format::kE5M2, &scale, &amax));
}

TEST(Fp8ArgsTest, MxCallsRefuseBadShapes) {
  std::vector<float> x(10, 1.0f);
  std::vector<std::uint8_t> q(10), scales(10);
  const TensorView v{x.data(), 10, DType::kFloat32};
  for (std::int64_t cols : {0, -3}) {
    EXPECT_THROW_WITH(quantize_mxfp8_(v, cols, q.data(), scales.data(), Fp8Format::kE4M3),
                      "quantize_mxfp8_: cols must be > 0, got " + std::to_string(cols));
    EXPECT_THROW_WITH(dequantize_mxfp8_(q.data(), scales.data(), cols, Fp8Format::kE4M3, v),
                      "dequantize_mxfp8_: cols must be > 0");
  }
  EXPECT_THROW_WITH(quantize_mxfp8_(v, 3, q.data(), scales.data(), Fp8Format::kE4M3),
                    "quantize_mxfp8_: x has 10 elements, not a multiple of cols = 3");
  EXPECT_THROW_WITH(dequantize_mxfp8_(q.data(), scales.data(), 4, Fp8Format::kE4M3, v),
                    "dequantize_mxfp8_: out has 10 elements, not a multiple of cols = 4");
  EXPECT_THROW_WITH(quantize_mxfp8_(v, 5, q.data(), nullptr, Fp8Format::kE4M3),
                    "quantize_mxfp8_: scales is null");
  EXPECT_THROW_WITH(quantize_mxfp8_(v, 5, q.data(), scales.data(), Fp8Format::kE4M3, nullptr,
                                    static_cast<NanAmax>(3)),
                    "quantize_mxfp8_: unsupported NanAmax 3");
  EXPECT_THROW_WITH(quantize_mxfp8_(v, 5, nullptr, scales.data(), Fp8Format::kE4M3),
                    "quantize_mxfp8_: q is null");
  EXPECT_THROW_WITH(dequantize_mxfp8_(q.data(), nullptr, 5, Fp8Format::kE4M3, v),
                    "dequantize_mxfp8_: scales is null");
  EXPECT_THROW_WITH(quantize_mxfp8_(v, 5, q.data(), scales.data(), static_cast<Fp8Format>(2)),
                    "quantize_mxfp8_: unsupported FP8 format 2");
}

TEST(Fp8ArgsTest, DelayedUpdateRefusesBadState) {
  std::vector<float> h(4, 1.0f);
  float scale = 1.0f, scale_inv = 1.0f;
  DelayedScaling rule;
  rule.history_len = 4;
  const DelayedTensor good{h.data(), 1, &scale, &scale_inv, Fp8Format::kE4M3};
  const std::string who = "delayed_scaling_update_: ";
  EXPECT_THROW_WITH(delayed_scaling_update_(nullptr, 1, rule),
                    who + "tensors is null but count is 1");
  DelayedScaling bad = rule;
  bad.history_len = 0;
  EXPECT_THROW_WITH(delayed_scaling_update_(&good, 1, bad),
                    who + "DelayedScaling::history_len must be >= 1, got 0");
  for (int margin : {200, -127}) {
    bad = rule;
    bad.margin = margin;
    EXPECT_THROW_WITH(delayed_scaling_update_(&good, 1, bad),
                      who + "DelayedScaling::margin must be in [-126, 127]");
  }
  bad = rule;
  bad.algo = static_cast<AmaxAlgo>(4);
  EXPECT_THROW_WITH(delayed_scaling_update_(&good, 1, bad), who + "unsupported AmaxAlgo 4");
  bad = rule;
  bad.nan = static_cast<NanAmax>(7);
  EXPECT_THROW_WITH(delayed_scaling_update_(&good, 1, bad), who + "unsupported NanAmax 7");
  DelayedTensor t = good;
  t.amax_history = nullptr;
  const DelayedTensor two[2] = {good, t};
  EXPECT_THROW_WITH(delayed_scaling_update_(two, 2, rule),
                    who + "tensor 1: amax_history, scale and scale_inv must not be null");
  t = good;
  t.stride = 0;
  EXPECT_THROW_WITH(delayed_scaling_update_(&t, 1, rule),
                    who + "tensor 0: stride must be >= 1, got 0");
  t = good;
  t.format = static_cast<Fp8Format>(3);
  EXPECT_THROW_WITH(delayed_scaling_update_(&t, 1, rule), who + "unsupported FP8 format 3");
  EXPECT_EQ(h, std::vector<float>(4, 1.0f)) << "a refused update rolled the history";
  EXPECT_EQ(scale, 1.0f);
}

TEST(Fp8ArgsTest, CudaBuffersWithoutCudaBuildSayHowToEnableIt) {
  if (cuda_kernels_built()) GTEST_SKIP() << "built with CUDA kernels";
  float x = 1.0f, amax = 0.0f, scale = 1.0f;
  std::uint8_t q = 0;
  const TensorView gpu{&x, 1, DType::kFloat32, {DeviceType::kCUDA, 0}};
  EXPECT_THROW_WITH(amax_(gpu, &amax),
                    "amax_: got CUDA buffers, but this build of mixprec has no CUDA kernels");
  EXPECT_THROW_WITH(quantize_fp8_(gpu, &q, Fp8Format::kE4M3, &scale),
                    "quantize_fp8_: got CUDA buffers");
  EXPECT_THROW_WITH(quantize_mxfp8_(gpu, 1, &q, &q, Fp8Format::kE4M3),
                    "quantize_mxfp8_: got CUDA buffers");
  DelayedScaling rule;
  rule.history_len = 1;
  const DelayedTensor t{&x, 1, &amax, &scale, Fp8Format::kE4M3};
  EXPECT_THROW_WITH(delayed_scaling_update_(&t, 1, rule, {DeviceType::kCUDA, 0}),
                    "delayed_scaling_update_: got CUDA buffers");
  EXPECT_EQ(q, 0);
}

}  // namespace
}  // namespace mixprec::core
