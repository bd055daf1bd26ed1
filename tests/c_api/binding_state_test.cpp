// The C ABI's state bytes as a binding stores them in its checkpoints: a C scaler's
// state_dict bytes are torch.save's format that the C++ API writes too, load into a new C scaler
// and into the C++ GradScaler (mixprec::pickle_load), and training continues identically.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "c_api/c_api_test_util.h"
#include "c_api/training.h"
#include "mixprec/checkpoint.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/serialize.h"

namespace mixprec::c_api_test {
namespace {

constexpr int kSaveAfter = 13;  // the state is saved after this many iterations (0..12)

/// The C scaler's state bytes, sized first with a NULL buffer, as a binding does.
std::vector<char> c_state_bytes(mixprec_grad_scaler* s) {
  size_t size = 0;
  MIXPREC_C_OK(mixprec_grad_scaler_state_dict(s, nullptr, 0, &size));
  std::vector<char> bytes(size);
  size_t written = 0;
  MIXPREC_C_OK(mixprec_grad_scaler_state_dict(s, bytes.data(), bytes.size(), &written));
  EXPECT_EQ(written, size);
  return bytes;
}

/// Trains `config` side by side to kSaveAfter, then saves the C scaler's state as bytes and
/// replaces each side's scaler by a new one (all defaults) loaded from them: the C side through
/// mixprec_grad_scaler_load_state_dict, the C++ side through pickle_load and load_state_dict.
/// Training goes on to kIterations, compared after every iteration.
void save_load_and_continue(const ScalerConfig& config) {
  const Models models = make_models();
  CSide c(clone_models(models), config, Kind::kTorchSgd, Kind::kFusedAdam, Convention::kRaw);
  CppSide cpp(clone_models(models), config, Kind::kTorchSgd, Kind::kFusedAdam);
  const std::vector<Batch> batches = make_batches();
  auto iterate = [&](int it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    const IterationReport c_report = train_iteration(c, batches[it], it, false);
    const IterationReport cpp_report = train_iteration(cpp, batches[it], it, false);
    expect_same_after_iteration(c, cpp, c_report, cpp_report);
  };
  for (int it = 0; it < kSaveAfter && !::testing::Test::HasFailure(); ++it) iterate(it);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_GT(cpp.telemetry().backoffs, 0);  // the saved state is not the initial one
  ASSERT_NE(cpp.get_scale(), config.init_scale);

  const std::vector<char> bytes = c_state_bytes(c.scaler.get());
  // The same bytes as the C++ API writes for the same state (torch.save's format).
  EXPECT_EQ(bytes, pickle_save_untagged(cpp.scaler.state_dict()));

  CScaler c_loaded = make_c_scaler(nullptr);
  MIXPREC_C_OK(mixprec_grad_scaler_load_state_dict(c_loaded.get(), bytes.data(), bytes.size()));
  GradScaler cpp_loaded;
  cpp_loaded.load_state_dict(pickle_load(bytes).toGenericDict());
  // Both hold the saved state, options of the update rule included.
  double d = 0.0;
  std::int64_t i = 0;
  MIXPREC_C_OK(mixprec_grad_scaler_get_scale(c_loaded.get(), &d));
  EXPECT_EQ(d, cpp.get_scale());
  EXPECT_EQ(cpp_loaded.get_scale(), cpp.get_scale());
  MIXPREC_C_OK(mixprec_grad_scaler_get_growth_tracker(c_loaded.get(), &i));
  EXPECT_EQ(i, cpp.get_growth_tracker());
  EXPECT_EQ(cpp_loaded.get_growth_tracker(), cpp.get_growth_tracker());
  MIXPREC_C_OK(mixprec_grad_scaler_get_growth_interval(c_loaded.get(), &i));
  EXPECT_EQ(i, config.growth_interval);
  EXPECT_EQ(cpp_loaded.get_growth_interval(), config.growth_interval);
  MIXPREC_C_OK(mixprec_grad_scaler_get_growth_factor(c_loaded.get(), &d));
  EXPECT_EQ(d, config.growth_factor);
  MIXPREC_C_OK(mixprec_grad_scaler_get_backoff_factor(c_loaded.get(), &d));
  EXPECT_EQ(d, config.backoff_factor);
  expect_same_telemetry(c_telemetry(c_loaded.get()), cpp_loaded.telemetry());
  // Saved again, the loaded C scaler gives the same bytes.
  EXPECT_EQ(c_state_bytes(c_loaded.get()), bytes);

  c.scaler = std::move(c_loaded);
  cpp.scaler = std::move(cpp_loaded);
  for (int it = kSaveAfter; it < kIterations && !::testing::Test::HasFailure(); ++it) iterate(it);
  EXPECT_GT(cpp.telemetry().iterations, 0);
}

TEST(BindingStateTest, StateBytesLoadInCAndCppAndTrainingContinuesIdentically) {
  save_load_and_continue(training_config());
}

// With options beyond PyTorch the state carries mixprec's extended keys (counters, history,
// hysteresis): they too survive the bytes. A new scaler with default options takes them.
TEST(BindingStateTest, ExtendedStateSurvivesTheBytes) {
  ScalerConfig config = training_config();
  config.hysteresis = 2;
  config.history_size = 8;
  save_load_and_continue(config);
}

// Bytes the C++ API wrote (pickle_save_untagged of state_dict(), as in a C++ checkpoint) load
// through the C API.
TEST(BindingStateTest, CppStateBytesLoadThroughTheCApi) {
  ScalerConfig config = training_config();
  config.init_scale = 96.0;
  config.growth_factor = 3.0;
  config.backoff_factor = 0.25;
  GradScaler cpp(config.cpp());
  const std::vector<char> bytes = pickle_save_untagged(cpp.state_dict());
  CScaler c = make_c_scaler(nullptr);
  MIXPREC_C_OK(mixprec_grad_scaler_load_state_dict(c.get(), bytes.data(), bytes.size()));
  double d = 0.0;
  MIXPREC_C_OK(mixprec_grad_scaler_get_scale(c.get(), &d));
  EXPECT_EQ(d, cpp.get_scale());
  MIXPREC_C_OK(mixprec_grad_scaler_get_growth_factor(c.get(), &d));
  EXPECT_EQ(d, cpp.get_growth_factor());
  MIXPREC_C_OK(mixprec_grad_scaler_get_backoff_factor(c.get(), &d));
  EXPECT_EQ(d, cpp.get_backoff_factor());
  EXPECT_EQ(c_state_bytes(c.get()), bytes);
}

// A disabled scaler's state is empty, as in C++ (and PyTorch); an enabled scaler refuses it.
TEST(BindingStateTest, DisabledStateIsTheCppOne) {
  ScalerConfig config;
  config.enabled = false;
  const mixprec_grad_scaler_options options = config.c();
  CScaler c = make_c_scaler(&options);
  const std::vector<char> bytes = c_state_bytes(c.get());
  EXPECT_EQ(bytes, pickle_save_untagged(GradScaler(config.cpp()).state_dict()));
  CScaler enabled = make_c_scaler(nullptr);
  GradScaler cpp_enabled;
  EXPECT_C_FAILS_WITH(
      mixprec_grad_scaler_load_state_dict(enabled.get(), bytes.data(), bytes.size()),
      MIXPREC_ERROR_RUNTIME,
      cpp_message([&] { cpp_enabled.load_state_dict(pickle_load(bytes).toGenericDict()); }));
}

}  // namespace
}  // namespace mixprec::c_api_test
