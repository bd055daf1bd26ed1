// Seed example 4: a disabled GradScaler (useful for debugging): Linear + Adam + CrossEntropyLoss,
// autocast(enabled=False), one step. Prints "Scaler enabled: False".
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <iostream>

#include "python_format.h"

int main() {
  using mixprec_examples::python_bool;

  // torch.manual_seed(0)
  torch::manual_seed(0);
  // model = nn.Linear(5, 2)
  torch::nn::Linear model(5, 2);
  // optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.001));
  // scaler = torch.cuda.amp.GradScaler(enabled=False)
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().enabled(false));

  // x = torch.randn(16, 5); y = torch.randint(0, 2, (16,))
  torch::Tensor x = torch::randn({16, 5});
  torch::Tensor y = torch::randint(0, 2, {16});

  optimizer.zero_grad();
  torch::Tensor loss;
  {
    // with torch.cuda.amp.autocast(enabled=False):
    mixprec::AutocastGuard autocast(torch::kCUDA, c10::nullopt, /*enabled=*/false);
    torch::Tensor pred = model->forward(x);
    loss = torch::nn::CrossEntropyLoss()(pred, y);
  }
  scaler.scale(loss).backward();
  scaler.step(optimizer);
  scaler.update();
  // print(f"Scaler enabled: {scaler.is_enabled()}")
  std::cout << "Scaler enabled: " << python_bool(scaler.is_enabled()) << "\n";
  return 0;
}
