// The code blocks of README.md and docs/ that are not parts of an example, compiled (and run
// where they can be) here: each doc block is marked `<!-- excerpt: tests/torch/docs_snippets_test.cpp -->`
// and docs.snippets_are_excerpts checks that its lines are these (tests/readme/check_snippets.py).
#include <gtest/gtest.h>
#include <mixprec/core/half.h>
#include <mixprec/core/loss_scaler.h>
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#ifdef MIXPREC_HAS_DISTRIBUTED
#include <mixprec/distributed.h>
#endif

namespace {

// README.md, "Without LibTorch": an engine with its own backward pass and optimizer step.
template <typename Backward, typename Step>
double core_snippet(double loss, std::vector<std::uint16_t>& grad, std::int64_t n,
                    Backward backward, Step optimizer_step) {
  mixprec::core::LossScaler scaler;                            // PyTorch's defaults
  backward(scaler.scale(loss));                                // grads come out scaled
  if (scaler.unscale_({{grad.data(), n, mixprec::core::DType::kFloat16}})) optimizer_step();
  scaler.update();
  return scaler.get_scale();
}

TEST(DocsSnippetsTest, ReadmeCoreLoop) {
  std::vector<std::uint16_t> grad(4);  // fp16 bits
  bool stepped = false;
  const double scale = core_snippet(
      0.5, grad, 4,
      [&](double scaled) {
        for (auto& g : grad) g = mixprec::core::float_to_half_bits(static_cast<float>(scaled));
      },
      [&] { stepped = true; });
  EXPECT_TRUE(stepped);
  EXPECT_EQ(mixprec::core::half_bits_to_float(grad[0]), 0.5f);  // 0.5 * 65536, unscaled in place
  EXPECT_EQ(scale, 65536.0);
}

TEST(DocsSnippetsTest, OptionsHysteresis) {
  // docs/options.md, "hysteresis(n)"
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().hysteresis(2));
  EXPECT_TRUE(scaler.state_dict().contains("mixprec_format"));  // a policy beyond PyTorch's
}

#ifdef MIXPREC_HAS_DISTRIBUTED
// docs/distributed.md: compiled, not run (the dist label runs the reducers over real groups).
[[maybe_unused]] void distributed_snippet(
    const c10::intrusive_ptr<c10d::ProcessGroup>& world,
    const c10::intrusive_ptr<c10d::ProcessGroup>& data_group,
    const c10::intrusive_ptr<c10d::ProcessGroup>& tensor_group,
    const c10::intrusive_ptr<c10d::ProcessGroup>& pipeline_group) {
  mixprec::GradScaler scaler;
  scaler.set_found_inf_reducer(mixprec::distributed::found_inf_reducer(world));
  // tensor/pipeline parallel: every group the gradients are split over, reduced in turn
  scaler.set_found_inf_reducer(
      mixprec::distributed::found_inf_reducer({data_group, tensor_group, pipeline_group}));
}
#endif

}  // namespace
