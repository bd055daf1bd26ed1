// The C ABI's state bytes as a binding stores them in its checkpoints: a C scaler's
// state_dict bytes are torch.save's format that the C++ API writes too, load into a new C scaler
// and into the C++ GradScaler (mixprec::pickle_load), and training continues identically. And the
// files and streams: the same bytes saved to a path (durably, as save_checkpoint saves) and
// through a binding's writer, loaded from a path and through its reader; a writer or reader that
// fails makes the call fail, saying so, and changes nothing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "c_api/c_api_test_util.h"
#include "c_api/training.h"
#include "mixprec/checkpoint.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/serialize.h"
#include "torch/crafted_files.h"

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

/// An optimizer's state bytes through the C API (one call; the buffer is the library's).
std::vector<char> c_optimizer_bytes(const COptimizer& optimizer) {
  void* data = nullptr;
  size_t size = 0;
  MIXPREC_C_OK(optimizer.state_dict(&data, &size));
  std::vector<char> bytes(static_cast<const char*>(data), static_cast<const char*>(data) + size);
  mixprec_bytes_free(data);
  return bytes;
}

class BindingOptimizerStateTest : public ::testing::TestWithParam<Convention> {};

// A run resumed from a binding: the scaler's and both optimizers' state saved through the C API
// after kSaveAfter iterations (the optimizers' bytes are the C++ API's, torch.save's format),
// loaded into a new C side (new scaler, new fused optimizers over copies of the parameters),
// a new learning rate set through the C API; training goes on bit for bit with the C++ side
// that never stopped. Without the moments (a load that did nothing) Adam's next steps differ.
TEST_P(BindingOptimizerStateTest, AResumedRunKeepsMomentsStepsAndTheNewLearningRate) {
  const Models models = make_models();
  const ScalerConfig config = training_config();
  CSide c(clone_models(models), config, Kind::kFusedSgd, Kind::kFusedAdamW, GetParam());
  CppSide cpp(clone_models(models), config, Kind::kFusedSgd, Kind::kFusedAdamW);
  const std::vector<Batch> batches = make_batches();
  for (int it = 0; it < kSaveAfter; ++it) {
    train_iteration(c, batches[it], it, false);
    train_iteration(cpp, batches[it], it, false);
  }
  const std::vector<char> scaler_bytes = c_state_bytes(c.scaler.get());
  std::vector<std::vector<char>> optimizer_bytes;
  for (int which : {0, 1}) {
    optimizer_bytes.push_back(c_optimizer_bytes(c.optimizers[which]));
    EXPECT_EQ(optimizer_bytes.back(),
              pickle_save_untagged(optimizer_state_dict(cpp.optimizer(which))));
  }

  CSide resumed(clone_models(c.models), config, Kind::kFusedSgd, Kind::kFusedAdamW, GetParam());
  MIXPREC_C_OK(mixprec_grad_scaler_load_state_dict(resumed.scaler.get(), scaler_bytes.data(),
                                                   scaler_bytes.size()));
  // The C++ side's scaler restarts from the same bytes (its telemetry too); its optimizers
  // never stop.
  GradScaler cpp_scaler(config.cpp());
  cpp_scaler.load_state_dict(pickle_load(scaler_bytes).toGenericDict());
  cpp.scaler = std::move(cpp_scaler);
  for (int which : {0, 1}) {
    const COptimizer& opt = resumed.optimizers[which];
    MIXPREC_C_OK(opt.load_state_dict(optimizer_bytes[which].data(), optimizer_bytes[which].size()));
    EXPECT_EQ(c_optimizer_bytes(opt), optimizer_bytes[which]);
    double lr = 0.0;
    MIXPREC_C_OK(opt.get_lr(&lr));
    MIXPREC_C_OK(opt.set_lr(lr * 0.5));
    for (auto& group : cpp.optimizer(which).param_groups()) {
      group.options().set_lr(group.options().get_lr() * 0.5);
    }
    double now = 0.0;
    MIXPREC_C_OK(opt.get_lr(&now));
    EXPECT_EQ(now, lr * 0.5);
  }
  for (int it = kSaveAfter; it < kIterations && !::testing::Test::HasFailure(); ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    const IterationReport c_report = train_iteration(resumed, batches[it], it, false);
    const IterationReport cpp_report = train_iteration(cpp, batches[it], it, false);
    expect_same_after_iteration(resumed, cpp, c_report, cpp_report);
  }
}

// Bytes that are no optimizer state change nothing and say why.
TEST_P(BindingOptimizerStateTest, BadBytesChangeNothing) {
  const Models models = make_models();
  CSide c(clone_models(models), training_config(), Kind::kFusedSgd, Kind::kFusedAdam, GetParam());
  const std::vector<char> before = c_optimizer_bytes(c.optimizers[1]);
  const std::vector<char> scaler_bytes = c_state_bytes(c.scaler.get());  // a dict, not the kind
  const std::vector<char> junk = {'n', 'o', 't', ' ', 'a', ' ', 'p', 'i', 'c', 'k', 'l', 'e'};
  // A storage count of -1 (3e5db6a: LibTorch's unpickler then copied the process's own memory
  // into the optimizer's state, or crashed).
  test::Pickle negative;
  negative.op('}').str("state").tensor("FloatStorage", "0", -1, 0, {4}, {1}).op('s');
  const std::vector<char> crafted = test::archive(negative.stop(), {{"data/0", ""}});
  for (const std::vector<char>* bytes : {&scaler_bytes, &junk, &crafted}) {
    EXPECT_NE(c.optimizers[1].load_state_dict(bytes->data(), bytes->size()), MIXPREC_OK);
    EXPECT_NE(std::string(mixprec_last_error()), "");
    EXPECT_EQ(c_optimizer_bytes(c.optimizers[1]), before);
  }
}

INSTANTIATE_TEST_SUITE_P(BothConventions, BindingOptimizerStateTest,
                         ::testing::Values(Convention::kRaw, Convention::kShared),
                         ::testing::PrintToStringParamName());

// The size query keeps the serialized bytes for the copy call that follows; a call that may
// change the scaler in between drops them, so the copy has the state as it is then.
TEST(BindingStateTest, TheCopyAfterAChangeHasTheNewState) {
  CScaler c = make_c_scaler(nullptr);
  size_t size = 0;
  MIXPREC_C_OK(mixprec_grad_scaler_state_dict(c.get(), nullptr, 0, &size));
  MIXPREC_C_OK(mixprec_grad_scaler_set_growth_factor(c.get(), 3.0));
  GradScaler cpp;
  cpp.set_growth_factor(3.0);
  const std::vector<char> want = pickle_save_untagged(cpp.state_dict());
  std::vector<char> bytes(want.size() + 16);
  size_t written = 0;
  MIXPREC_C_OK(mixprec_grad_scaler_state_dict(c.get(), bytes.data(), bytes.size(), &written));
  bytes.resize(written);
  EXPECT_EQ(bytes, want);
}

// ---- files and streams -------------------------------------------------------------------

// A binding's stream: a growing buffer, read at offsets; `fail_at` makes a call fail.
struct Stream {
  std::vector<char> bytes;
  int calls = 0, fail_at = -1;
  static int write(void* context, const void* data, size_t size) {
    auto* s = static_cast<Stream*>(context);
    if (s->calls++ == s->fail_at) return 5;
    s->bytes.insert(s->bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return 0;
  }
  static int read(void* context, uint64_t offset, void* buffer, size_t size) {
    auto* s = static_cast<Stream*>(context);
    if (s->calls++ == s->fail_at || offset + size > s->bytes.size()) return 7;
    std::memcpy(buffer, s->bytes.data() + offset, size);
    return 0;
  }
};

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

TEST(BindingFilesTest, AScalerSavedToAPathOrAStreamLoadsBack) {
  mixprec_grad_scaler_options options;
  mixprec_grad_scaler_options_default(&options);
  mixprec_grad_scaler_options_set_init_scale(&options, 512.0);
  mixprec_grad_scaler_options_set_growth_interval(&options, 7);
  CScaler saved = make_c_scaler(&options);
  const std::string path = ::testing::TempDir() + "mixprec_c_files_scaler.pt";
  MIXPREC_C_OK(mixprec_grad_scaler_save(saved.get(), path.c_str()));
  Stream stream;
  MIXPREC_C_OK(mixprec_grad_scaler_save_to(saved.get(), &Stream::write, &stream));
  // Both are torch.save's bytes of the state_dict, as the state_dict call writes them.
  const std::vector<char> want = c_state_bytes(saved.get());
  EXPECT_TRUE(file_bytes(path) == want);
  EXPECT_TRUE(stream.bytes == want);
  for (const bool from_path : {true, false}) {
    CScaler loaded = make_c_scaler(nullptr);
    stream.calls = 0;
    MIXPREC_C_OK(from_path ? mixprec_grad_scaler_load(loaded.get(), path.c_str())
                           : mixprec_grad_scaler_load_from(loaded.get(), &Stream::read, &stream,
                                                           stream.bytes.size()));
    double scale = 0;
    MIXPREC_C_OK(mixprec_grad_scaler_get_scale(loaded.get(), &scale));
    EXPECT_EQ(scale, 512.0);
    EXPECT_TRUE(c_state_bytes(loaded.get()) == want);
  }
}

TEST(BindingFilesTest, FailingWritersReadersAndPathsFailTheCallAndChangeNothing) {
  CScaler s = make_c_scaler(nullptr);
  Stream writer;
  writer.fail_at = 1;
  EXPECT_EQ(mixprec_grad_scaler_save_to(s.get(), &Stream::write, &writer), MIXPREC_ERROR_RUNTIME);
  EXPECT_NE(std::string(mixprec_last_error()).find(
                "mixprec_grad_scaler_save_to: the writer failed writing"), std::string::npos)
      << mixprec_last_error();
  Stream good;
  MIXPREC_C_OK(mixprec_grad_scaler_save_to(s.get(), &Stream::write, &good));
  const std::vector<char> before = c_state_bytes(s.get());
  good.calls = 0;
  good.fail_at = 2;
  EXPECT_EQ(mixprec_grad_scaler_load_from(s.get(), &Stream::read, &good, good.bytes.size()),
            MIXPREC_ERROR_RUNTIME);
  EXPECT_NE(std::string(mixprec_last_error()).find("its reader failed reading"), std::string::npos)
      << mixprec_last_error();
  EXPECT_TRUE(c_state_bytes(s.get()) == before);
  EXPECT_EQ(mixprec_grad_scaler_save(s.get(), "/nonexistent-mixprec-folder/s.pt"),
            MIXPREC_ERROR_RUNTIME);
  EXPECT_NE(std::string(mixprec_last_error()).find(
                "mixprec_grad_scaler_save: cannot save /nonexistent-mixprec-folder/s.pt: open() failed"),
            std::string::npos)
      << mixprec_last_error();
  EXPECT_EQ(mixprec_grad_scaler_load(s.get(), "/nonexistent-mixprec-folder/s.pt"),
            MIXPREC_ERROR_RUNTIME);
  EXPECT_TRUE(c_state_bytes(s.get()) == before);
}

// An optimizer's state through a path and through streams, both conventions: the moments come
// back bit for bit.
TEST(BindingFilesTest, AnOptimizerSavedToAPathOrAStreamLoadsBack) {
  torch::Tensor w = torch::ones({3}, torch::requires_grad());
  w.mutable_grad() = torch::full({3}, 0.25);
  torch::optim::Adam adam({w}, torch::optim::AdamOptions(0.1));
  adam.step();
  auto shared = std::make_shared<torch::optim::Adam>(std::vector<torch::Tensor>{w},
                                                     torch::optim::AdamOptions(0.1));
  std::shared_ptr<torch::optim::Optimizer> shared_base = shared;
  shared->step();
  const std::string path = ::testing::TempDir() + "mixprec_c_files_optimizer.pt";
  const std::vector<char> want = pickle_save_untagged(optimizer_state_dict(adam));
  for (const bool is_shared : {false, true}) {
    void* handle = is_shared ? static_cast<void*>(&shared_base) : static_cast<void*>(&adam);
    MIXPREC_C_OK(is_shared ? mixprec_optimizer_save_shared(handle, path.c_str())
                           : mixprec_optimizer_save(handle, path.c_str()));
    EXPECT_TRUE(file_bytes(path) == want);
    Stream stream;
    MIXPREC_C_OK(is_shared ? mixprec_optimizer_save_to_shared(handle, &Stream::write, &stream)
                           : mixprec_optimizer_save_to(handle, &Stream::write, &stream));
    EXPECT_TRUE(stream.bytes == want);
    for (const bool from_path : {true, false}) {
      torch::Tensor v = torch::ones({3}, torch::requires_grad());
      torch::optim::Adam fresh({v}, torch::optim::AdamOptions(0.5));
      auto fresh_shared = std::make_shared<torch::optim::Adam>(std::vector<torch::Tensor>{v},
                                                               torch::optim::AdamOptions(0.5));
      std::shared_ptr<torch::optim::Optimizer> fresh_base = fresh_shared;
      void* into = is_shared ? static_cast<void*>(&fresh_base) : static_cast<void*>(&fresh);
      stream.calls = 0;
      const uint64_t n = stream.bytes.size();
      MIXPREC_C_OK(from_path ? (is_shared ? mixprec_optimizer_load_shared(into, path.c_str())
                                          : mixprec_optimizer_load(into, path.c_str()))
                             : (is_shared ? mixprec_optimizer_load_from_shared(into, &Stream::read, &stream, n)
                                          : mixprec_optimizer_load_from(into, &Stream::read, &stream, n)));
      const torch::optim::Optimizer& got = is_shared ? *fresh_base : fresh;
      EXPECT_TRUE(pickle_save_untagged(optimizer_state_dict(got)) == want);
    }
  }
}

}  // namespace
}  // namespace mixprec::c_api_test
