// The C ABI's errors for misuse: a status and mixprec_last_error() with the very message the C++
// API throws for the same misuse (computed here by doing the same to the C++ GradScaler or
// torch::optim), the out-parameters left alone, and no exception crossing: every failing call is
// made through a noexcept function (an escaping exception would terminate the test program).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c_api/c_api_test_util.h"
#include "mixprec/checkpoint.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/serialize.h"

namespace mixprec::c_api_test {
namespace {

/// A C scaler and a C++ one with the same options, and one SGD optimizer over a parameter with
/// a gradient for each (the C side's in `convention`).
class MisuseTest : public ::testing::TestWithParam<Convention> {
 protected:
  void SetUp() override {
    options_ = ScalerConfig().c();
    c_ = make_c_scaler(&options_);
    c_param_ = torch::ones({4}, torch::requires_grad());
    cpp_param_ = torch::ones({4}, torch::requires_grad());
    c_param_.mutable_grad() = torch::full({4}, 2.0f);
    cpp_param_.mutable_grad() = torch::full({4}, 2.0f);
    c_opt_.emplace(
        COptimizer::adopt(std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{c_param_},
                                                              torch::optim::SGDOptions(0.1)),
                          GetParam()));
    cpp_opt_ = std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{cpp_param_},
                                                   torch::optim::SGDOptions(0.1));
  }
  /// scale() on both sides, which creates the scale (as a loss would be scaled).
  void scale_both() {
    torch::Tensor loss = torch::ones({});
    OwnedTensor scaled;
    MIXPREC_C_OK(mixprec_grad_scaler_scale(c_.get(), &loss, scaled.out()));
    cpp_.scale(loss);
  }
  mixprec_grad_scaler* c() { return c_.get(); }
  const COptimizer& c_opt() { return *c_opt_; }

  mixprec_grad_scaler_options options_;
  CScaler c_{nullptr, &mixprec_grad_scaler_destroy};
  GradScaler cpp_;
  torch::Tensor c_param_, cpp_param_;
  std::optional<COptimizer> c_opt_;
  std::unique_ptr<torch::optim::Optimizer> cpp_opt_;
};

TEST_P(MisuseTest, UnscaleTwiceFailsWithTheCppMessage) {
  scale_both();
  MIXPREC_C_OK(c_opt().unscale_(c()));
  cpp_.unscale_(*cpp_opt_);
  EXPECT_C_FAILS_WITH(c_opt().unscale_(c()), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.unscale_(*cpp_opt_); }));
}

TEST_P(MisuseTest, StepTwiceFailsWithTheCppMessage) {
  scale_both();
  MIXPREC_C_OK(c_opt().step(c(), nullptr));  // out_stepped may be NULL
  cpp_.step(*cpp_opt_);
  int stepped = 7;
  EXPECT_C_FAILS_WITH(c_opt().step(c(), &stepped), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.step(*cpp_opt_); }));
  EXPECT_EQ(stepped, 7);
}

TEST_P(MisuseTest, UnscaleAfterStepFailsWithTheCppMessage) {
  scale_both();
  MIXPREC_C_OK(c_opt().step(c(), nullptr));
  cpp_.step(*cpp_opt_);
  EXPECT_C_FAILS_WITH(c_opt().unscale_(c()), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.unscale_(*cpp_opt_); }));
}

TEST_P(MisuseTest, UpdateWithoutInfChecksFailsWithTheCppMessage) {
  scale_both();
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_update(c()), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.update(); }));
}

TEST_P(MisuseTest, CallsBeforeTheFirstScaleFailWithTheCppMessages) {
  EXPECT_C_FAILS_WITH(c_opt().unscale_(c()), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.unscale_(*cpp_opt_); }));
  EXPECT_C_FAILS_WITH(c_opt().step(c(), nullptr), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.step(*cpp_opt_); }));
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_update(c()), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.update(); }));
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_update_to(c(), 2.0), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.update(2.0); }));
}

TEST_P(MisuseTest, Fp16GradientsFailWithTheCppMessage) {
  scale_both();
  c_param_.mutable_grad() = c_param_.grad().to(torch::kHalf);
  cpp_param_.mutable_grad() = cpp_param_.grad().to(torch::kHalf);
  EXPECT_C_FAILS_WITH(c_opt().unscale_(c()), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.unscale_(*cpp_opt_); }));
  // The gradient-list path refuses them alike.
  torch::Tensor c_grad = c_param_.grad();
  void* grads[] = {&c_grad};
  void* found = &c_grad;  // a sentinel the failure must keep
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_unscale_grads_(c(), grads, 1, &found),
                      MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.unscale_grads_({cpp_param_.grad()}); }));
  EXPECT_EQ(found, static_cast<void*>(&c_grad));
}

TEST_P(MisuseTest, UpdateToATwoElementTensorFailsWithTheCppMessage) {
  scale_both();
  torch::Tensor two = torch::full({2}, 4.0f);
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_update_to_tensor(c(), &two), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.update(two); }));
}

TEST_P(MisuseTest, StepWithoutGradientsFailsWithTheCppMessage) {
  scale_both();
  c_param_.mutable_grad() = torch::Tensor();
  cpp_param_.mutable_grad() = torch::Tensor();
  EXPECT_C_FAILS_WITH(c_opt().step(c(), nullptr), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.step(*cpp_opt_); }));
}

// A binding's handle may hold an undefined tensor (tch-rs, TorchSharp): refused as in C++.
TEST_P(MisuseTest, UndefinedTensorsFailWithTheCppMessages) {
  torch::Tensor undefined;
  void* out = &undefined;  // a sentinel the failures must keep
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_scale(c(), &undefined, &out), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.scale(undefined); }));
  EXPECT_EQ(out, static_cast<void*>(&undefined));
  scale_both();
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_update_to_tensor(c(), &undefined), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp_.update(undefined); }));
}

INSTANTIATE_TEST_SUITE_P(CApi, MisuseTest, ::testing::Values(Convention::kRaw, Convention::kShared),
                         [](const ::testing::TestParamInfo<Convention>& info) {
                           return std::string(info.param == Convention::kRaw ? "Raw" : "Shared");
                         });

// A TorchSharp handle whose shared_ptr holds nothing is refused like a NULL one.
TEST(SharedHandleErrorsTest, AnEmptySharedPtrIsANullArgument) {
  CScaler s = make_c_scaler(nullptr);
  auto* empty = new std::shared_ptr<torch::optim::Optimizer>();
  const int rc = call_noexcept(
      [&]() noexcept { return mixprec_grad_scaler_step_shared(s.get(), empty, nullptr); });
  EXPECT_EQ(rc, MIXPREC_ERROR_NULL_ARGUMENT);
  EXPECT_NE(std::string(mixprec_last_error()).find("shared_optimizer"), std::string::npos)
      << mixprec_last_error();
  mixprec_optimizer_free_shared(empty);
}

// Invalid values: the C++ constructor's message, no scaler made.
TEST(CreateErrorsTest, InvalidOptionsFailWithTheCppMessage) {
  std::vector<ScalerConfig> configs(5);
  configs[0].init_scale = 0.0;
  configs[1].growth_factor = 1.0;
  configs[2].backoff_factor = 1.5;
  configs[3].growth_interval = 0;
  configs[4].history_size = -1;
  for (const ScalerConfig& config : configs) {
    const mixprec_grad_scaler_options options = config.c();
    mixprec_grad_scaler* out = reinterpret_cast<mixprec_grad_scaler*>(0x1234);
    EXPECT_C_FAILS_WITH(mixprec_grad_scaler_create(&options, &out), MIXPREC_ERROR_RUNTIME,
                        cpp_message([&] { GradScaler scaler(config.cpp()); }));
    EXPECT_EQ(out, reinterpret_cast<mixprec_grad_scaler*>(0x1234));
  }
}

// What C alone can get wrong: a struct not filled by _default, an enum value out of range.
TEST(CreateErrorsTest, BadStructSizeOrEnumIsAnInvalidArgument) {
  struct Case {
    void (*spoil)(mixprec_grad_scaler_options&);
    const char* field;
  };
  const Case cases[] = {
      {[](mixprec_grad_scaler_options& o) { o.struct_size = 0; }, "struct_size"},
      {[](mixprec_grad_scaler_options& o) { o.struct_size -= 8; }, "struct_size"},
      {[](mixprec_grad_scaler_options& o) { o.struct_size += 8; }, "struct_size"},
      {[](mixprec_grad_scaler_options& o) { o.hysteresis_refill = 2; }, "hysteresis_refill"},
      {[](mixprec_grad_scaler_options& o) { o.at_min_scale = -1; }, "at_min_scale"},
  };
  for (const Case& c : cases) {
    mixprec_grad_scaler_options options = ScalerConfig().c();
    c.spoil(options);
    mixprec_grad_scaler* out = nullptr;
    const int rc =
        call_noexcept([&]() noexcept { return mixprec_grad_scaler_create(&options, &out); });
    EXPECT_EQ(rc, MIXPREC_ERROR_INVALID_ARGUMENT) << c.field;
    EXPECT_NE(std::string(mixprec_last_error()).find(c.field), std::string::npos)
        << mixprec_last_error();
    EXPECT_EQ(out, nullptr);
  }
}

// options_init takes the caller's size of the struct: one no version has is refused, untouched.
TEST(CreateErrorsTest, OptionsInitRefusesASizeNoVersionHas) {
  for (size_t size : {size_t{0}, sizeof(mixprec_grad_scaler_options) - 8,
                      sizeof(mixprec_grad_scaler_options) + 8}) {
    mixprec_grad_scaler_options options;
    std::memset(&options, 0x5a, sizeof options);
    const int rc =
        call_noexcept([&]() noexcept { return mixprec_grad_scaler_options_init(&options, size); });
    EXPECT_EQ(rc, MIXPREC_ERROR_INVALID_ARGUMENT) << size;
    EXPECT_NE(std::string(mixprec_last_error()).find("struct_size"), std::string::npos)
        << mixprec_last_error();
    EXPECT_EQ(options.struct_size, 0x5a5a5a5a5a5a5a5au);
  }
  // This header's size: the same fields as _default.
  mixprec_grad_scaler_options init, defaults;
  std::memset(&init, 0x5a, sizeof init);
  MIXPREC_C_OK(mixprec_grad_scaler_options_init(&init, sizeof init));
  mixprec_grad_scaler_options_default(&defaults);
  EXPECT_EQ(init.struct_size, defaults.struct_size);
  EXPECT_EQ(init.init_scale, defaults.init_scale);
  EXPECT_EQ(init.growth_factor, defaults.growth_factor);
  EXPECT_EQ(init.backoff_factor, defaults.backoff_factor);
  EXPECT_EQ(init.growth_interval, defaults.growth_interval);
  EXPECT_EQ(init.enabled, defaults.enabled);
  EXPECT_EQ(init.hysteresis, defaults.hysteresis);
  EXPECT_EQ(init.hysteresis_refill, defaults.hysteresis_refill);
  EXPECT_EQ(init.min_scale, defaults.min_scale);
  EXPECT_EQ(init.max_scale, defaults.max_scale);
  EXPECT_EQ(init.at_min_scale, defaults.at_min_scale);
  EXPECT_EQ(init.history_size, defaults.history_size);
}

// at_min_scale ERROR: an overflow at min_scale makes update() fail with the C++ kThrow message.
TEST(UpdateErrorsTest, OverflowAtMinScaleFailsWithTheCppMessage) {
  ScalerConfig config;
  config.init_scale = 2.0;
  config.min_scale = 1.0;
  config.error_at_min_scale = true;
  const mixprec_grad_scaler_options options = config.c();
  CScaler c = make_c_scaler(&options);
  GradScaler cpp(config.cpp());
  torch::Tensor loss = torch::ones({});
  OwnedTensor scaled;
  MIXPREC_C_OK(mixprec_grad_scaler_scale(c.get(), &loss, scaled.out()));
  cpp.scale(loss);
  for (int i = 0; i < 2; ++i) {  // 2 -> 1 (min_scale), then an overflow at min_scale
    torch::Tensor c_grad = torch::full({2}, std::numeric_limits<float>::infinity());
    torch::Tensor cpp_grad = c_grad.clone();
    void* grads[] = {&c_grad};
    OwnedTensor found;
    MIXPREC_C_OK(mixprec_grad_scaler_unscale_grads_(c.get(), grads, 1, found.out()));
    cpp.unscale_grads_({cpp_grad});
    if (i == 0) {
      MIXPREC_C_OK(mixprec_grad_scaler_update(c.get()));
      cpp.update();
    }
  }
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_update(c.get()), MIXPREC_ERROR_RUNTIME,
                      cpp_message([&] { cpp.update(); }));
}

// ---- state bytes --------------------------------------------------------------------------------

/// A C scaler that has scaled once and had its rule's options changed, and its state bytes.
struct StateFixture {
  CScaler c = make_c_scaler(nullptr);
  std::vector<char> bytes;
  StateFixture() {
    torch::Tensor loss = torch::ones({});
    OwnedTensor scaled;
    MIXPREC_C_OK(mixprec_grad_scaler_scale(c.get(), &loss, scaled.out()));
    MIXPREC_C_OK(mixprec_grad_scaler_update_to(c.get(), 12.0));
    MIXPREC_C_OK(mixprec_grad_scaler_set_growth_interval(c.get(), 17));
    bytes = state_bytes();
  }
  std::vector<char> state_bytes() {
    size_t size = 0;
    MIXPREC_C_OK(mixprec_grad_scaler_state_dict(c.get(), nullptr, 0, &size));
    std::vector<char> out(size);
    MIXPREC_C_OK(mixprec_grad_scaler_state_dict(c.get(), out.data(), size, &size));
    return out;
  }
};

TEST(StateErrorsTest, GarbageBytesFailWithTheCppMessageAndChangeNothing) {
  StateFixture f;
  const std::vector<char> garbage(64, 'x');
  GradScaler cpp;
  EXPECT_C_FAILS_WITH(
      mixprec_grad_scaler_load_state_dict(f.c.get(), garbage.data(), garbage.size()),
      MIXPREC_ERROR_RUNTIME,
      cpp_message([&] { cpp.load_state_dict(pickle_load(garbage).toGenericDict()); }));
  EXPECT_EQ(f.state_bytes(), f.bytes);
}

TEST(StateErrorsTest, AnInvalidValueFailsWithTheCppMessageAndChangesNothing) {
  StateFixture f;
  GradScaler cpp;
  c10::impl::GenericDict dict = cpp.state_dict();
  dict.insert_or_assign("scale", -1.0);
  const std::vector<char> bad = pickle_save_untagged(dict);
  EXPECT_C_FAILS_WITH(mixprec_grad_scaler_load_state_dict(f.c.get(), bad.data(), bad.size()),
                      MIXPREC_ERROR_RUNTIME, cpp_message([&] { cpp.load_state_dict(dict); }));
  EXPECT_EQ(f.state_bytes(), f.bytes);
}

TEST(StateErrorsTest, BytesOfSomethingElseThanADictFail) {
  StateFixture f;
  const std::vector<char> list = pickle_save_untagged(c10::IValue(c10::List<double>({1.0})));
  const int rc = call_noexcept([&]() noexcept {
    return mixprec_grad_scaler_load_state_dict(f.c.get(), list.data(), list.size());
  });
  EXPECT_EQ(rc, MIXPREC_ERROR_RUNTIME);
  EXPECT_EQ(std::string(mixprec_last_error()),
            "mixprec_grad_scaler_load_state_dict: the bytes hold a GenericList, not a state dict");
  EXPECT_EQ(f.state_bytes(), f.bytes);
}

TEST(StateErrorsTest, ASmallBufferIsBufferTooSmallWithTheSizeSetAndTheBufferUntouched) {
  StateFixture f;
  std::vector<char> small(f.bytes.size() - 1, '\x11');
  size_t size = 0;
  const int rc = call_noexcept([&]() noexcept {
    return mixprec_grad_scaler_state_dict(f.c.get(), small.data(), small.size(), &size);
  });
  EXPECT_EQ(rc, MIXPREC_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(size, f.bytes.size());
  EXPECT_EQ(std::string(mixprec_last_error()),
            "mixprec_grad_scaler_state_dict: the state takes " + std::to_string(f.bytes.size()) +
                " bytes, the buffer has " + std::to_string(small.size()) +
                " (call with buffer NULL for the size)");
  EXPECT_EQ(small, std::vector<char>(f.bytes.size() - 1, '\x11'));
}

// ---- fused optimizers ---------------------------------------------------------------------------

// Option checks with torch::optim's messages, for each create call; nothing is returned.
TEST(OptimizerErrorsTest, InvalidOptionsFailWithTorchOptimMessages) {
  std::vector<torch::Tensor> params{torch::ones({3}, torch::requires_grad())};
  std::vector<void*> ps = handles(params);
  using torch::optim::AdamOptions;
  using torch::optim::AdamWOptions;
  using torch::optim::SGDOptions;
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "_create_shared" : "_create");
    void* out = &params;  // a sentinel the failures must keep
    auto sgd = shared ? mixprec_optim_sgd_create_shared : mixprec_optim_sgd_create;
    auto adam = shared ? mixprec_optim_adam_create_shared : mixprec_optim_adam_create;
    auto adamw = shared ? mixprec_optim_adamw_create_shared : mixprec_optim_adamw_create;
    EXPECT_C_FAILS_WITH(sgd(ps.data(), 1, -0.1, 0.0, 0.0, 0.0, 0, &out), MIXPREC_ERROR_RUNTIME,
                        cpp_message([&] { torch::optim::SGD(params, SGDOptions(-0.1)); }));
    EXPECT_C_FAILS_WITH(
        sgd(ps.data(), 1, 0.1, 0.0, 0.0, 0.0, 1, &out), MIXPREC_ERROR_RUNTIME,
        cpp_message([&] { torch::optim::SGD(params, SGDOptions(0.1).nesterov(true)); }));
    EXPECT_C_FAILS_WITH(adam(ps.data(), 1, -0.1, 0.9, 0.999, 1e-8, 0.0, 0, &out),
                        MIXPREC_ERROR_RUNTIME,
                        cpp_message([&] { torch::optim::Adam(params, AdamOptions(-0.1)); }));
    EXPECT_C_FAILS_WITH(adam(ps.data(), 1, 0.1, 1.5, 0.999, 1e-8, 0.0, 0, &out),
                        MIXPREC_ERROR_RUNTIME, cpp_message([&] {
                          torch::optim::Adam(params, AdamOptions(0.1).betas({1.5, 0.999}));
                        }));
    EXPECT_C_FAILS_WITH(adamw(ps.data(), 1, -0.1, 0.9, 0.999, 1e-8, 0.01, 0, &out),
                        MIXPREC_ERROR_RUNTIME,
                        cpp_message([&] { torch::optim::AdamW(params, AdamWOptions(-0.1)); }));
    EXPECT_C_FAILS_WITH(
        adamw(ps.data(), 1, 0.1, 0.9, 0.999, -1.0, 0.01, 0, &out), MIXPREC_ERROR_RUNTIME,
        cpp_message([&] { torch::optim::AdamW(params, AdamWOptions(0.1).eps(-1.0)); }));
    EXPECT_EQ(out, static_cast<void*>(&params));
  }
}

}  // namespace
}  // namespace mixprec::c_api_test
