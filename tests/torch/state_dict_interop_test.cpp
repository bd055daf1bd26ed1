// Checkpoint interop with PyTorch, without Python: python_*.pt (torch.save of PyTorch's
// GradScaler.state_dict(), made by tests/fixtures/generate_fixtures.py) load into mixprec, and
// torch::pickle_save(state_dict()) still writes the cpp_*.pt bytes that Python was shown to read.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "fixtures/scenarios.h"
#include "mixprec/mixprec.h"
#include "torch/test_util.h"

namespace mixprec {
namespace {

// The LibTorch release that wrote the committed cpp_*.pt; its serializer's bytes are the reference.
constexpr int kFixturesTorchMajor = 1;
constexpr int kFixturesTorchMinor = 13;

std::string fixture_path(const std::string& file) {
  return std::string(MIXPREC_FIXTURES_DIR) + "/" + file;
}

std::vector<char> read_bytes(const std::string& file) {
  std::ifstream in(fixture_path(file), std::ios::binary);
  TORCH_CHECK(in, "cannot open fixture ", fixture_path(file), " (see tests/fixtures/README.md)");
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

c10::impl::GenericDict load_dict(const std::string& file) {
  const c10::IValue value = torch::pickle_load(read_bytes(file));
  TORCH_CHECK(value.isGenericDict(), file, " does not hold a dict but a ", value.tagKind());
  return value.toGenericDict();
}

// The values generate_fixtures.py gave each python_<name>.pt (see SCENARIOS there).
struct Expected {
  const char* name;
  double scale;
  double growth_factor;
  double backoff_factor;
  std::int64_t growth_interval;
  std::int64_t growth_tracker;
};
const Expected kPythonFixtures[] = {
    {"default", 65536.0, 2.0, 0.5, 2000, 0},
    {"custom", 1536.0, 1.5, 0.25, 100, 37},   // 137 clean steps, grew once at 100
    {"backoff", 32768.0, 2.0, 0.5, 2000, 3},  // 5 clean, 1 overflow, 3 clean
    {"fractional", 0.1, 1.25, 0.125, 7, 0},   // 0.1 as a double, not float32
    {"int_valued", 4096.0, 2.0, 0.5, 50, 0},  // saved as Python ints: scale=4096, growth_factor=2
};

// A starting point that differs from every fixture in every field, so a load that does nothing
// fails.
GradScalerOptions unlike_any_fixture() {
  return GradScalerOptions()
      .init_scale(3.0)
      .growth_factor(3.0)
      .backoff_factor(0.75)
      .growth_interval(11);
}

// Full scale/backward/step/update iterations: 'c' = clean step, 'i' = gradients hold inf.
using fixtures::run_iterations;

// Same keys in the same order, same IValue kinds (Double vs Int), same values.
::testing::AssertionResult same_dict(const c10::impl::GenericDict& got,
                                     const c10::impl::GenericDict& expected) {
  if (got.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << expected.size();
  }
  auto g = got.begin();
  for (auto e = expected.begin(); e != expected.end(); ++e, ++g) {
    if (!(g->key() == e->key())) {
      return ::testing::AssertionFailure()
             << "key " << g->key() << " where " << e->key() << " was expected";
    }
    if (g->value().tagKind() != e->value().tagKind() || !(g->value() == e->value())) {
      return ::testing::AssertionFailure()
             << "\"" << e->key().toStringRef() << "\": got " << g->value() << " ("
             << g->value().tagKind() << "), expected " << e->value() << " (" << e->value().tagKind()
             << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(StateDictInteropTest, PythonFixturesHoldWhatTheGeneratorWrote) {
  const std::vector<std::string> keys = {"scale", "growth_factor", "backoff_factor",
                                         "growth_interval", "_growth_tracker"};
  for (const Expected& e : kPythonFixtures) {
    SCOPED_TRACE(e.name);
    const c10::impl::GenericDict dict = load_dict(std::string("python_") + e.name + ".pt");
    ASSERT_EQ(dict.size(), keys.size());
    std::size_t i = 0;
    for (const auto& entry : dict) EXPECT_EQ(entry.key().toStringRef(), keys[i++]);
    const bool ints = std::string(e.name) == "int_valued";
    EXPECT_EQ(dict.at("scale").tagKind(), ints ? "Int" : "Double");
    EXPECT_EQ(dict.at("growth_factor").tagKind(), ints ? "Int" : "Double");
    EXPECT_EQ(dict.at("backoff_factor").tagKind(), "Double");
    EXPECT_EQ(dict.at("growth_interval").tagKind(), "Int");
    EXPECT_EQ(dict.at("_growth_tracker").tagKind(), "Int");
  }
}

TEST(StateDictInteropTest, PythonFixturesLoadIntoAFreshScaler) {
  for (const Expected& e : kPythonFixtures) {
    SCOPED_TRACE(e.name);
    GradScaler scaler(unlike_any_fixture());
    scaler.load_state_dict(load_dict(std::string("python_") + e.name + ".pt"));
    EXPECT_EQ(scaler.get_scale(), e.scale);
    EXPECT_EQ(scaler.get_growth_factor(), e.growth_factor);
    EXPECT_EQ(scaler.get_backoff_factor(), e.backoff_factor);
    EXPECT_EQ(scaler.get_growth_interval(), e.growth_interval);
    EXPECT_EQ(scaler.get_growth_tracker(), e.growth_tracker);

    // And saving it again gives PyTorch's types: floats as Double, ints as Int.
    const c10::impl::GenericDict sd = scaler.state_dict();
    ASSERT_EQ(sd.size(), 5u);
    EXPECT_EQ(sd.at("scale").tagKind(), "Double");
    EXPECT_EQ(sd.at("scale").toDouble(), e.scale);
    EXPECT_EQ(sd.at("growth_factor").tagKind(), "Double");
    EXPECT_EQ(sd.at("growth_factor").toDouble(), e.growth_factor);
    EXPECT_EQ(sd.at("backoff_factor").toDouble(), e.backoff_factor);
    EXPECT_EQ(sd.at("growth_interval").toInt(), e.growth_interval);
    EXPECT_EQ(sd.at("_growth_tracker").toInt(), e.growth_tracker);
  }
}

TEST(StateDictInteropTest, PythonFixturesLoadIntoAScalerThatAlreadyScaled) {
  // The scale and tracker tensors exist, so they are filled in place; the scale is a float32.
  for (const Expected& e : kPythonFixtures) {
    SCOPED_TRACE(e.name);
    GradScaler scaler(unlike_any_fixture());
    run_iterations(scaler, "cc");
    ASSERT_EQ(scaler.get_growth_tracker(), 2);
    scaler.load_state_dict(load_dict(std::string("python_") + e.name + ".pt"));
    EXPECT_EQ(scaler.get_scale(), static_cast<double>(static_cast<float>(e.scale)));
    EXPECT_EQ(scaler.get_growth_factor(), e.growth_factor);
    EXPECT_EQ(scaler.get_backoff_factor(), e.backoff_factor);
    EXPECT_EQ(scaler.get_growth_interval(), e.growth_interval);
    EXPECT_EQ(scaler.get_growth_tracker(), e.growth_tracker);
  }
}

TEST(StateDictInteropTest, TrainingResumesFromAPythonCheckpoint) {
  GradScaler custom(unlike_any_fixture());
  custom.load_state_dict(load_dict("python_custom.pt"));  // 1536, tracker 37 of 100
  run_iterations(custom, std::string(62, 'c'));
  EXPECT_EQ(custom.get_scale(), 1536.0);
  EXPECT_EQ(custom.get_growth_tracker(), 99);
  run_iterations(custom, "c");
  EXPECT_EQ(custom.get_scale(), 2304.0);  // 1536 * 1.5
  EXPECT_EQ(custom.get_growth_tracker(), 0);

  GradScaler backoff;
  backoff.load_state_dict(load_dict("python_backoff.pt"));  // 32768, tracker 3
  run_iterations(backoff, "i");
  EXPECT_EQ(backoff.get_scale(), 16384.0);
  EXPECT_EQ(backoff.get_growth_tracker(), 0);
}

TEST(StateDictInteropTest, PythonDisabledFixtureIsEmptyAndRefusedByAnEnabledScaler) {
  const c10::impl::GenericDict empty = load_dict("python_disabled.pt");
  EXPECT_EQ(empty.size(), 0u);

  GradScaler enabled(unlike_any_fixture());
  EXPECT_THROW_WITH(enabled.load_state_dict(empty), "The source state dict is empty");
  EXPECT_EQ(enabled.get_scale(), 3.0);
  EXPECT_EQ(enabled.get_growth_interval(), 11);

  GradScaler disabled(GradScalerOptions().enabled(false));
  EXPECT_NO_THROW(disabled.load_state_dict(empty));
  EXPECT_NO_THROW(disabled.load_state_dict(load_dict("python_default.pt")));
  EXPECT_FALSE(disabled.is_enabled());
  EXPECT_EQ(disabled.get_scale(), 1.0);
}

using CppScenario = fixtures::Scenario;
using fixtures::scenarios;

std::vector<char> saved_bytes(const CppScenario& s) {
  GradScaler scaler(s.options);
  run_iterations(scaler, s.iterations);
  return torch::pickle_save(scaler.state_dict());
}

c10::impl::GenericDict scenario_state_dict(const CppScenario& s) {
  GradScaler scaler(s.options);
  run_iterations(scaler, s.iterations);
  return scaler.state_dict();
}

TEST(StateDictInteropTest, CppScenariosReachTheSameStateAsPython) {
  // The same iterations give the same dict in mixprec as in PyTorch (python_<name>.pt).
  for (const CppScenario& s : scenarios()) {
    SCOPED_TRACE(s.name);
    EXPECT_TRUE(
        same_dict(scenario_state_dict(s), load_dict(std::string("python_") + s.name + ".pt")));
  }
}

TEST(StateDictInteropTest, CppFixturesLoadBackAsTheSameDict) {
  // Holds on any LibTorch version: what the committed cpp_*.pt hold is what state_dict() gives now.
  for (const CppScenario& s : scenarios()) {
    SCOPED_TRACE(s.name);
    EXPECT_TRUE(same_dict(load_dict(std::string("cpp_") + s.name + ".pt"), scenario_state_dict(s)));
  }
}

TEST(StateDictInteropTest, CppFixturesAreWrittenByteForByte) {
  // Python read the committed cpp_*.pt (generate_fixtures.py); identical bytes prove it still
  // would.
  if (TORCH_VERSION_MAJOR != kFixturesTorchMajor || TORCH_VERSION_MINOR != kFixturesTorchMinor) {
    GTEST_SKIP() << "cpp_*.pt were written by LibTorch " << kFixturesTorchMajor << "."
                 << kFixturesTorchMinor << "; this is " << TORCH_VERSION_MAJOR << "."
                 << TORCH_VERSION_MINOR
                 << " (CppFixturesLoadBackAsTheSameDict still checks the contents)";
  }
  for (const CppScenario& s : scenarios()) {
    SCOPED_TRACE(s.name);
    const std::vector<char> bytes = saved_bytes(s);
    if (bytes != saved_bytes(s)) {
      // Not byte-deterministic here: fall back to comparing what the bytes load as.
      std::cout << "note: pickle_save is not byte-deterministic; comparing dicts for " << s.name
                << "\n";
      EXPECT_TRUE(same_dict(torch::pickle_load(bytes).toGenericDict(),
                            load_dict(std::string("cpp_") + s.name + ".pt")));
      continue;
    }
    const std::vector<char> committed = read_bytes(std::string("cpp_") + s.name + ".pt");
    std::size_t first_difference = 0;
    while (first_difference < bytes.size() && first_difference < committed.size() &&
           bytes[first_difference] == committed[first_difference]) {
      ++first_difference;
    }
    EXPECT_TRUE(bytes == committed)
        << "torch::pickle_save(state_dict()) gives " << bytes.size() << " bytes, cpp_" << s.name
        << ".pt has " << committed.size() << "; first difference at byte " << first_difference
        << ". If the change is intended, regenerate and re-verify with Python "
           "(tests/fixtures/README.md).";
  }
}

// torch::save(scaler, ...) / torch::load(scaler, ...) through LibTorch's archives, beside the
// pickle path: the same state, extensions included, and load's checks are load_state_dict's.
TEST(StateDictInteropTest, TorchSaveAndLoadOfAScalerRoundTrip) {
  GradScaler saved(GradScalerOptions().init_scale(1024.0).growth_interval(3).hysteresis(2));
  saved.scale(torch::ones({}));
  for (int i = 0; i < 2; ++i) {  // two clean steps: the growth tracker moves
    torch::Tensor w = torch::zeros({1}, torch::requires_grad());
    torch::optim::SGD opt({w}, torch::optim::SGDOptions(1.0));
    w.mutable_grad() = torch::ones({1});
    saved.step(opt);
    saved.update();
  }
  std::stringstream buffer;
  torch::save(saved, buffer);
  GradScaler loaded;
  torch::load(loaded, buffer);
  EXPECT_EQ(loaded.get_scale(), 1024.0);
  EXPECT_EQ(loaded.get_growth_interval(), 3);
  EXPECT_EQ(loaded.get_growth_tracker(), 2);
  const c10::impl::GenericDict a = saved.state_dict(), b = loaded.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& entry : a) {
    ASSERT_TRUE(b.contains(entry.key())) << entry.key().toStringRef();
    EXPECT_EQ(b.at(entry.key()), entry.value()) << entry.key().toStringRef();
  }
  // A disabled scaler saves nothing, and an enabled one refuses that, as load_state_dict does.
  std::stringstream empty;
  torch::save(GradScaler(GradScalerOptions().enabled(false)), empty);
  GradScaler enabled;
  EXPECT_THROW_WITH(torch::load(enabled, empty), "The source state dict is empty");
}

}  // namespace
}  // namespace mixprec
