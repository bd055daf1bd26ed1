// Optimizer checkpoints across LibTorch versions: the committed fixtures
// tests/fixtures/optim_<name>_libtorch113.pt (written by LibTorch 1.13, hex parameter keys) and
// optim_<name>_libtorch26.pt (LibTorch 2.6, decimal keys) load into mixprec's fused optimizers on
// whatever LibTorch runs this, each state onto the right parameter, and training goes on exactly
// as it would have without the checkpoint. A control test records what torch::optim itself does
// with a 1.13 checkpoint (Note [Optimizer checkpoints across LibTorch versions]).
#include <gtest/gtest.h>
#include <mixprec/optim.h>
#include <mixprec/torch_version.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <string>
#include <vector>

#include "fixtures/optimizer_checkpoints.h"
#include "torch/test_util.h"

namespace {

using mixprec::fixtures::checkpoint_params;
using mixprec::fixtures::kOptimizerNames;
using mixprec::fixtures::kOptimizerSteps;
using mixprec::fixtures::make_checkpoint_optimizer;
using mixprec::fixtures::run_checkpoint_steps;
using torch::Tensor;

constexpr bool kLibTorch2 = MIXPREC_TORCH_2;

std::string fixture(const std::string& name, const std::string& version) {
  return std::string(MIXPREC_FIXTURES_DIR) + "/optim_" + name + "_libtorch" + version + ".pt";
}

// The state's tensors (momentum buffer, or exp_avg / exp_avg_sq / max_exp_avg_sq) and step.
std::vector<Tensor> state_tensors(const torch::optim::OptimizerParamState* s, std::int64_t* step) {
  *step = -1;
  if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(s)) {
    *step = a->step();
    return {a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()};
  }
  if (auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(s)) {
    *step = w->step();
    return {w->exp_avg(), w->exp_avg_sq(), w->max_exp_avg_sq()};
  }
  if (auto* g = dynamic_cast<const torch::optim::SGDParamState*>(s)) return {g->momentum_buffer()};
  return {};
}

void expect_same_state(const torch::optim::Optimizer& loaded, const std::vector<Tensor>& lp,
                       const torch::optim::Optimizer& reference, const std::vector<Tensor>& rp,
                       const std::string& where) {
  ASSERT_EQ(loaded.state().size(), reference.state().size()) << where;
  for (std::size_t i = 0; i < lp.size(); ++i) {
    const auto* ls = find_state(loaded, lp[i]);
    const auto* rs = find_state(reference, rp[i]);
    ASSERT_NE(rs, nullptr);
    ASSERT_NE(ls, nullptr) << where << ": param " << i << " has no state after load";
    std::int64_t lstep = 0, rstep = 0;
    const std::vector<Tensor> lt = state_tensors(ls, &lstep), rt = state_tensors(rs, &rstep);
    EXPECT_EQ(lstep, rstep) << where << ": param " << i << " step";
    ASSERT_EQ(lt.size(), rt.size()) << where << ": param " << i << " state type";
    for (std::size_t k = 0; k < lt.size(); ++k) {
      ASSERT_EQ(lt[k].defined(), rt[k].defined()) << where << ": param " << i << " tensor " << k;
      if (!rt[k].defined()) continue;
      ASSERT_EQ(lt[k].sizes(), rp[i].sizes()) << where << ": param " << i << " got another's state";
      EXPECT_TRUE(torch::allclose(lt[k], rt[k], 1e-6, 1e-7)) << where << ": param " << i;
    }
  }
}

TEST(OptimCheckpointTest, CheckpointsOfBothLibTorchVersionsLoadOntoTheRightParameters) {
  for (const std::string version : {"113", "26"}) {
    for (const std::string& name : kOptimizerNames) {
      const std::string where = "optim_" + name + "_libtorch" + version + ".pt on " TORCH_VERSION;
      // The reference: the scenario's steps, here, without a checkpoint.
      const std::vector<Tensor> rp = checkpoint_params();
      auto reference = make_checkpoint_optimizer(name, rp);
      run_checkpoint_steps(*reference, rp, 1, kOptimizerSteps);
      // Fresh parameters with the reference's values, a fresh optimizer, the checkpoint.
      std::vector<Tensor> lp;
      for (const Tensor& p : rp) lp.push_back(p.detach().clone());
      auto loaded = make_checkpoint_optimizer(name, lp);
      torch::load(*loaded, fixture(name, version));
      expect_same_state(*loaded, lp, *reference, rp, where);
      // The second group's own options came back too (its learning rate differs).
      EXPECT_EQ(loaded->param_groups()[1].options().get_lr(),
                reference->param_groups()[1].options().get_lr());
      // And training goes on as if it had never stopped.
      run_checkpoint_steps(*reference, rp, kOptimizerSteps + 1, kOptimizerSteps + 2);
      run_checkpoint_steps(*loaded, lp, kOptimizerSteps + 1, kOptimizerSteps + 2);
      for (std::size_t i = 0; i < rp.size(); ++i) {
        EXPECT_TRUE(torch::allclose(lp[i], rp[i], 1e-6, 1e-7)) << where << ": param " << i;
      }
      if (HasFailure()) return;
    }
  }
}

TEST(OptimCheckpointTest, AMismatchedCheckpointIsRefusedWithLibTorchsMessage) {
  for (const std::string version : {"113", "26"}) {
    const std::vector<Tensor> params = checkpoint_params();
    mixprec::optim::Adam one_group(params, torch::optim::AdamOptions(0.01));
    EXPECT_THROW_WITH(torch::load(one_group, fixture("adam", version)),
                      "loaded state dict has a different number of parameter groups");
    mixprec::optim::Adam short_group(  // two groups, the second one parameter short
        {torch::optim::OptimizerParamGroup({params[0], params[1]}),
         torch::optim::OptimizerParamGroup({params[2]})},
        torch::optim::AdamOptions(0.01));
    EXPECT_THROW_WITH(torch::load(short_group, fixture("adam", version)),
                      "a parameter group that has a different size");
  }
}

TEST(OptimCheckpointTest, TorchOptimItselfMisfilesA113CheckpointOnLibTorch2) {
  // What torch::optim::Adam does with the same 1.13 checkpoint. On 1.13: loads it correctly. On
  // 2.x: every hex key parses as 0, so the first parameter gets the state last read (of another
  // parameter) and the other three get a null state. This test records that finding, so that a
  // LibTorch that fixes it shows up here.
  const std::vector<Tensor> params = checkpoint_params();
  torch::optim::Adam adam(  // the fixture's two param groups
      {torch::optim::OptimizerParamGroup({params[0], params[1]}),
       torch::optim::OptimizerParamGroup({params[2], params[3]})},
      torch::optim::AdamOptions(0.01));
  torch::load(adam, fixture("adam", "113"));
  int null_states = 0, wrong_shapes = 0, right = 0;
  for (const Tensor& p : params) {
    const auto* s = find_state(adam, p);
    if (s == nullptr) {
      ++null_states;  // no entry at all
      continue;
    }
    const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(s);
    if (a == nullptr) {
      ++null_states;  // an entry holding a null state
    } else if (a->exp_avg().sizes() != p.sizes()) {
      ++wrong_shapes;
    } else {
      ++right;
    }
  }
  if (kLibTorch2) {
    EXPECT_EQ(right, 0) << "LibTorch " TORCH_VERSION " loads some 1.13 states right now";
    EXPECT_EQ(null_states, 3);
    EXPECT_EQ(null_states + wrong_shapes, 4);
  } else {
    EXPECT_EQ(right, 4);
  }
}

}  // namespace
