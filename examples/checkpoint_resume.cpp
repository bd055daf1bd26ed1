// The README's "Checkpoints" recipe, as a program (the README shows an excerpt; CTest
// docs.snippets_are_excerpts keeps it one): train, save model + optimizer + scaler in one file,
// resume into fresh objects, and check that the resumed run ends exactly where an uninterrupted
// one does. Exits non-zero otherwise. Python resumes from the same file with plain torch.load
// (tests/python/checkpoint_interop.py).
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <string>

namespace {

struct Run {
  torch::nn::Sequential model{torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 1)};
  mixprec::optim::AdamW optimizer{model->parameters(), torch::optim::AdamWOptions(1e-2)};
  mixprec::GradScaler scaler;

  void train(int steps) {
    for (int s = 0; s < steps; ++s) {
      const torch::Tensor x = torch::randn({32, 8});
      optimizer.zero_grad();
      scaler.scale(torch::mse_loss(model->forward(x), x.sum(1, true))).backward();
      scaler.step(optimizer);
      scaler.update();
    }
  }
};

}  // namespace

int main() {
  const std::string path = "mixprec_checkpoint_example.pt";
  torch::manual_seed(0);
  Run run;
  run.train(20);
  auto& [model, optimizer, scaler] = run;

  // Save: one file, the layout of Python's
  // torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
  //             "scaler": scaler.state_dict()}, path)
  mixprec::save_checkpoint(path, *model, optimizer, scaler);

  Run resumed;  // new objects, built as the saved ones were (another init)
  {
    auto& [model, optimizer, scaler] = resumed;
    // Resume, here or in Python: the model and optimizer must have the saved layout.
    mixprec::load_checkpoint(path, *model, optimizer, scaler);
  }

  torch::manual_seed(1);
  run.train(10);
  torch::manual_seed(1);
  resumed.train(10);
  bool same = resumed.scaler.get_scale() == scaler.get_scale();
  const auto params = model->parameters(), resumed_params = resumed.model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) same = same && torch::equal(params[i], resumed_params[i]);
  std::cout << "resumed from " << path << ": " << (same ? "same" : "DIFFERENT")
            << " parameters and scale as the uninterrupted run\n";
  std::remove(path.c_str());
  return same ? 0 : 1;
}
