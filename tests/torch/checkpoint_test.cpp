// mixprec::save_checkpoint / load_checkpoint and the state_dict converters
// (include/mixprec/checkpoint.h) on every LibTorch: a checkpoint written by Python 2.6 loads with
// PyTorch's own values, a C++ round trip resumes bit for bit, bad checkpoints change nothing.
// The live exchange with Python is tests/python/checkpoint_interop.py (label python).
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <mixprec/mixprec.h>
#include <mixprec/torch_version.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "value_dump.h"

namespace {

using torch::Tensor;

std::string fixture(const std::string& name) { return std::string(MIXPREC_FIXTURES_DIR) + "/" + name; }

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "mixprec_checkpoint_test_" + name;
}

// The fixture's model: Linear(3, 4, bias=False) -> BatchNorm1d(4) -> ReLU -> Linear(4, 2).
torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(torch::nn::LinearOptions(3, 4).bias(false)),
                               torch::nn::BatchNorm1d(4), torch::nn::ReLU(),
                               torch::nn::Linear(4, 2));
}

// tests/fixtures/python_checkpoint_expected.txt: "<key> <numbers...>" per line.
std::map<std::string, std::vector<double>> expected_values() {
  std::ifstream in(fixture("python_checkpoint_expected.txt"));
  std::map<std::string, std::vector<double>> values;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string key;
    words >> key;
    for (double v = 0; words >> v;) values[key].push_back(v);
  }
  return values;
}

std::vector<double> values_of(const Tensor& t) {
  const Tensor flat = t.detach().to(torch::kDouble).reshape(-1).contiguous();
  return std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
}

// A string literal's bytes, NULs included.
template <std::size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void train(torch::nn::Sequential& model, torch::optim::Optimizer& opt,
           mixprec::GradScaler& scaler, int steps, int seed) {
  torch::manual_seed(seed);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    scaler.scale(model->forward(torch::randn({5, 3})).square().mean()).backward();
    scaler.step(opt);
    scaler.update();
  }
}

// Every parameter and buffer, and every optimizer state tensor, cloned.
std::vector<Tensor> snapshot(const torch::nn::Module& model, const torch::optim::Optimizer& opt) {
  std::vector<Tensor> all;
  for (const auto& item : mixprec::module_state_dict(model)) {
    all.push_back(item.value().toTensor().clone());
  }
  const auto optimizer = mixprec::optimizer_state_dict(opt);
  for (const auto& state : optimizer.at("state").toGenericDict()) {
    for (const auto& entry : state.value().toGenericDict()) {
      all.push_back(entry.value().toTensor().clone());
    }
  }
  return all;
}

void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "entry " << i;
}

TEST(CheckpointTest, APythonCheckpointLoadsWithPyTorchsOwnValues) {
  // LibTorch's own loader cannot read it: model.state_dict() is an OrderedDict.
  EXPECT_ANY_THROW(torch::pickle_load(read_bytes(fixture("python_checkpoint.pt"))));

  torch::nn::Sequential model = small_model();
  mixprec::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.5));
  mixprec::GradScaler scaler;
  mixprec::load_checkpoint(fixture("python_checkpoint.pt"), *model, opt, scaler);

  const auto expected = expected_values();
  for (const auto& item : mixprec::module_state_dict(*model)) {
    EXPECT_EQ(values_of(item.value().toTensor()), expected.at("model." + item.key().toStringRef()))
        << item.key().toStringRef();
  }
  const auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto* state = dynamic_cast<const torch::optim::AdamParamState*>(find_state(opt, params[i]));
    ASSERT_NE(state, nullptr) << "parameter " << i;
    const std::string key = "adam." + std::to_string(i) + ".";
    EXPECT_EQ(static_cast<double>(state->step()), expected.at(key + "step")[0]);
    EXPECT_EQ(values_of(state->exp_avg()), expected.at(key + "exp_avg"));
    EXPECT_EQ(values_of(state->exp_avg_sq()), expected.at(key + "exp_avg_sq"));
  }
  EXPECT_EQ(opt.param_groups()[0].options().get_lr(), expected.at("lr")[0]);
  EXPECT_EQ(scaler.get_scale(), expected.at("scale")[0]);
  EXPECT_EQ(scaler.state_dict().at("_growth_tracker").toInt(), expected.at("growth_tracker")[0]);
}

// Saved, loaded into objects built unlike them, trained on: bit for bit the uninterrupted run.
template <typename Optimizer, typename Options>
void expect_round_trip_resumes(Options options, Options other) {
  torch::manual_seed(1);
  torch::nn::Sequential model = small_model();
  Optimizer opt(model->parameters(), options);
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(256).growth_interval(2));
  train(model, opt, scaler, 5, 10);
  const std::string path = temp_path("round_trip.pt");
  mixprec::save_checkpoint(path, *model, opt, scaler);

  torch::manual_seed(2);
  torch::nn::Sequential resumed = small_model();
  Optimizer resumed_opt(resumed->parameters(), other);
  mixprec::GradScaler resumed_scaler;
  mixprec::load_checkpoint(path, *resumed, resumed_opt, resumed_scaler);
  std::remove(path.c_str());
  expect_same(snapshot(*resumed, resumed_opt), snapshot(*model, opt));

  train(model, opt, scaler, 4, 20);
  train(resumed, resumed_opt, resumed_scaler, 4, 20);
  expect_same(snapshot(*resumed, resumed_opt), snapshot(*model, opt));
  EXPECT_EQ(resumed_scaler.get_scale(), scaler.get_scale());
  EXPECT_TRUE(resumed_scaler.state_dict() == scaler.state_dict());
}

TEST(CheckpointTest, ARoundTripResumesBitForBit) {
  using torch::optim::AdamOptions;
  using torch::optim::AdamWOptions;
  using torch::optim::SGDOptions;
  expect_round_trip_resumes<torch::optim::SGD>(SGDOptions(0.05).momentum(0.9).nesterov(true),
                                               SGDOptions(0.7));
  expect_round_trip_resumes<torch::optim::Adam>(AdamOptions(0.01), AdamOptions(0.3));
  expect_round_trip_resumes<mixprec::optim::Adam>(AdamOptions(0.01).weight_decay(0.1),
                                                  AdamOptions(0.3));
  expect_round_trip_resumes<mixprec::optim::AdamW>(AdamWOptions(0.01).amsgrad(true),
                                                   AdamWOptions(0.3));
  expect_round_trip_resumes<mixprec::optim::SGD>(SGDOptions(0.05).momentum(0.5), SGDOptions(0.7));
}

TEST(CheckpointTest, OptimizerStateDictsHavePythonsKeys) {
  // The optimizer.state_dict() keys of the PyTorch this LibTorch is (torch/optim/adam.py and
  // sgd.py): Adam's and AdamW's groups gained "decoupled_weight_decay" in 2.7.
  std::vector<std::string> adam = {"lr", "betas", "eps", "weight_decay", "amsgrad",
                                   "maximize", "foreach", "capturable", "differentiable",
                                   "fused"};
  if (MIXPREC_TORCH_AT_LEAST(2, 7)) adam.push_back("decoupled_weight_decay");
  adam.push_back("params");
  const std::vector<std::string> sgd = {"lr", "momentum", "dampening", "weight_decay", "nesterov",
                                        "maximize", "foreach", "differentiable", "fused", "params"};
  auto keys = [](const c10::impl::GenericDict& sd) {
    std::vector<std::string> out;
    for (const auto& e : sd.at("param_groups").toListRef()[0].toGenericDict()) {
      out.push_back(e.key().toStringRef());
    }
    return out;
  };
  torch::nn::Sequential model = small_model();
  mixprec::optim::Adam adam_opt(model->parameters());
  torch::optim::SGD sgd_opt(model->parameters(), 0.1);
  mixprec::optim::AdamW adamw_opt(model->parameters());
  EXPECT_EQ(keys(mixprec::optimizer_state_dict(adam_opt)), adam);
  EXPECT_EQ(keys(mixprec::optimizer_state_dict(adamw_opt)), adam);
  EXPECT_EQ(keys(mixprec::optimizer_state_dict(sgd_opt)), sgd);
  if (MIXPREC_TORCH_AT_LEAST(2, 7)) {  // Adam's False, AdamW's True, as Python writes them
    auto decoupled = [](const torch::optim::Optimizer& o) {
      return mixprec::optimizer_state_dict(o).at("param_groups").toListRef()[0]
          .toGenericDict().at("decoupled_weight_decay").toBool();
    };
    EXPECT_FALSE(decoupled(adam_opt));
    EXPECT_TRUE(decoupled(adamw_opt));
  }
  const auto group = mixprec::optimizer_state_dict(adam_opt).at("param_groups").toListRef()[0];
  EXPECT_TRUE(group.toGenericDict().at("betas").isTuple());
  EXPECT_EQ(group.toGenericDict().at("params").toListRef().size(), 5u);

  torch::optim::RMSprop rmsprop(model->parameters());
  EXPECT_THROW_WITH(mixprec::optimizer_state_dict(rmsprop), "only SGD, Adam and AdamW");
}

TEST(CheckpointTest, ABadCheckpointIsRefusedAndChangesNothing) {
  torch::manual_seed(1);
  torch::nn::Sequential model = small_model();
  mixprec::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  mixprec::GradScaler scaler;
  train(model, opt, scaler, 2, 3);
  const std::string path = temp_path("bad.pt");
  mixprec::save_checkpoint(path, *model, opt, scaler);
  train(model, opt, scaler, 1, 4);  // now unlike the file
  const auto before = snapshot(*model, opt);
  const double scale_before = scaler.get_scale();
  auto expect_unchanged = [&] {
    expect_same(snapshot(*model, opt), before);
    EXPECT_EQ(scaler.get_scale(), scale_before);
  };

  torch::nn::Sequential wider(torch::nn::Linear(torch::nn::LinearOptions(3, 5).bias(false)),
                              torch::nn::BatchNorm1d(5));
  EXPECT_THROW_WITH(mixprec::load_module_state_dict(*wider, mixprec::module_state_dict(*model)),
                    "size mismatch for 0.weight: copying a param with shape [4, 3] from "
                    "checkpoint, the shape in current model is [5, 3].");
  auto sd = mixprec::module_state_dict(*model);
  sd.insert("extra.weight", torch::zeros({1}));
  (void)sd.erase("3.bias");
  EXPECT_THROW_WITH(mixprec::load_module_state_dict(*model, sd),
                    "Error(s) in loading state_dict for torch::nn::Sequential");  // ...Impl on 1.13
  EXPECT_THROW_WITH(mixprec::load_module_state_dict(*model, sd),
                    ":\n\tMissing key(s) in state_dict: \"3.bias\".\n\tUnexpected key(s) in "
                    "state_dict: \"extra.weight\".");
  expect_unchanged();

  // A checkpoint of two param groups into one; an SGD checkpoint into Adam; maximize=True.
  mixprec::optim::Adam two_groups({torch::optim::OptimizerParamGroup(model->parameters()),
                                   torch::optim::OptimizerParamGroup({torch::ones({1})})});
  EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(opt, mixprec::optimizer_state_dict(two_groups)),
                    "loaded state dict has a different number of parameter groups");
  expect_unchanged();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train(model, sgd, scaler, 1, 5);  // SGD now has momentum buffers (model and scaler change)
  const auto sgd_dict = mixprec::optimizer_state_dict(sgd);
  const auto after_sgd = snapshot(*model, opt);
  EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(opt, sgd_dict), "has no \"step\"");
  auto maximize = mixprec::optimizer_state_dict(opt);
  maximize.at("param_groups").toListRef()[0].toGenericDict().insert_or_assign("maximize", true);
  EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(opt, maximize), "maximize=True");
  // Steps that are no int64 >= 0 (libFuzzer found 2.6e24, whose conversion was undefined
  // behaviour: the ASan + UBSan run of this test stops there without the range check).
  for (const double step : {-1.0, 2.5, 0x1p63, 2.56897e24, std::nan("")}) {
    auto bad_step = mixprec::optimizer_state_dict(opt);
    for (const auto& entry : bad_step.at("state").toGenericDict()) {
      entry.value().toGenericDict().insert_or_assign("step",
                                                     torch::tensor(step, torch::kFloat64));
    }
    EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(opt, bad_step),
                      "must be a whole number >= 0 and < 2^63");
  }
  expect_same(snapshot(*model, opt), after_sgd);

  // A scaler entry that fails its own checks: the model and optimizer stay as they were too.
  torch::nn::Sequential other = small_model();
  mixprec::optim::Adam other_opt(other->parameters());
  mixprec::GradScaler other_scaler;
  const auto other_before = snapshot(*other, other_opt);
  c10::impl::GenericDict ckpt(c10::StringType::get(), c10::AnyType::get());
  auto bad_scaler = scaler.state_dict();
  bad_scaler.insert_or_assign("scale", -1.0);
  ckpt.insert("model", mixprec::module_state_dict(*model));
  ckpt.insert("optimizer", mixprec::optimizer_state_dict(opt));
  ckpt.insert("scaler", bad_scaler);
  const std::vector<char> bytes = mixprec::pickle_save_untagged(ckpt);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_THROW_WITH(mixprec::load_checkpoint(path, *other, other_opt, other_scaler),
                    "\"scale\" must be finite and > 0");
  expect_same(snapshot(*other, other_opt), other_before);
  EXPECT_THROW_WITH(mixprec::load_checkpoint(temp_path("missing.pt"), *other, other_opt, other_scaler),
                    "cannot open " + temp_path("missing.pt"));
  std::remove(path.c_str());
}

// PyTorch >= 2.7 says in Adam's and AdamW's groups whether their weight decay is decoupled:
// Adam(decoupled_weight_decay=True) is AdamW's math, which LibTorch's Adam does not have. Such a
// group is refused where it would resume as the other decay, whatever LibTorch reads it (the
// files come from Python), and loads where the math is the same.
TEST(CheckpointTest, DecoupledWeightDecayLoadsOnlyWhereItsMathIs) {
  torch::nn::Sequential model = small_model();
  auto with = [](const torch::optim::Optimizer& from, c10::IValue decoupled, double weight_decay) {
    auto sd = mixprec::optimizer_state_dict(from);
    auto group = sd.at("param_groups").toListRef()[0].toGenericDict();
    group.insert_or_assign("decoupled_weight_decay", decoupled);
    group.insert_or_assign("weight_decay", weight_decay);
    return sd;
  };
  mixprec::optim::Adam adam(model->parameters());
  mixprec::optim::AdamW adamw(model->parameters());
  torch::optim::Adam torch_adam(model->parameters());
  torch::optim::AdamW torch_adamw(model->parameters());
  const char* to_adamw = "param group 0 has decoupled_weight_decay=True (AdamW's weight decay";
  const char* to_adam = "param group 0 has decoupled_weight_decay=False (Adam's L2 weight decay)";
  EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(adam, with(adam, true, 0.01)), to_adamw);
  EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(torch_adam, with(adam, true, 0.01)),
                    to_adamw);
  EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(adamw, with(adamw, false, 0.01)), to_adam);
  EXPECT_THROW_WITH(mixprec::load_optimizer_state_dict(torch_adamw, with(adamw, false, 0.01)),
                    to_adam);
  EXPECT_EQ(static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options())
                .weight_decay(), 0.0);  // refused: nothing changed
  // The same math: the decay it names, no decay at all, or no value (as no key: PyTorch < 2.7).
  EXPECT_NO_THROW(mixprec::load_optimizer_state_dict(adam, with(adam, false, 0.01)));
  EXPECT_NO_THROW(mixprec::load_optimizer_state_dict(adamw, with(adamw, true, 0.01)));
  EXPECT_NO_THROW(mixprec::load_optimizer_state_dict(adam, with(adam, true, 0.0)));
  EXPECT_NO_THROW(mixprec::load_optimizer_state_dict(adam, with(adam, c10::IValue(), 0.01)));
  EXPECT_EQ(static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options())
                .weight_decay(), 0.01);
}

TEST(CheckpointTest, PythonOnlyKeysAreIgnoredAndNumbersMayBeIntsOrTensors) {
  torch::nn::Sequential model = small_model();
  mixprec::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  auto sd = mixprec::optimizer_state_dict(opt);
  auto group = sd.at("param_groups").toListRef()[0].toGenericDict();
  group.insert_or_assign("initial_lr", 0.02);  // an LR scheduler's
  group.insert_or_assign("foreach", true);
  group.insert_or_assign("weight_decay", 0);                      // Python's int default
  group.insert_or_assign("lr", torch::full({}, 0.25, torch::kDouble));  // lr as a tensor
  mixprec::load_optimizer_state_dict(opt, sd);
  const auto& options = static_cast<const torch::optim::AdamOptions&>(opt.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.25);
  EXPECT_EQ(options.weight_decay(), 0.0);
}

// Files Python's torch.save wrote (tests/fixtures/torch_save_<version>.pt, by
// tests/python/unpickle_interop.py --write-fixture with torch 2.6 and 2.15: checkpoints, optimizer
// states, parameters, views of one storage, every dtype LibTorch 1.13 has, nested values) load on
// every LibTorch as torch.load loaded them (.dump: its text, tests/value_dump.h).
TEST(CheckpointTest, TorchSaveFixturesLoadAsTorchLoadLoadsThem) {
  int files = 0;
  for (const char* version : {"2_6", "2_15"}) {
    const std::string path = fixture(std::string("torch_save_") + version + ".pt");
    std::ifstream dump(path.substr(0, path.size() - 3) + ".dump");
    std::string want;
    ASSERT_TRUE(std::getline(dump, want)) << path;
    const std::string got = mixprec::test::ValueDump()(mixprec::pickle_load(read_bytes(path)));
    EXPECT_EQ(got, want) << path;
    ++files;
  }
  EXPECT_EQ(files, 2);
}

}  // namespace
