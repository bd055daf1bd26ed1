// Seed example 3: the basic mixed-precision training loop (Linear + SGD + MSELoss, two epochs).
// Prints "Epoch 1: scale=65536.0" and "Epoch 2: scale=65536.0". Without CUDA the autocast guard
// warns and stays off (as Python does); the scaler itself stays enabled on the CPU.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <iostream>

#include "python_format.h"

int main() {
  using mixprec_examples::python_float_repr;

  // torch.manual_seed(0)
  torch::manual_seed(0);
  // model = nn.Linear(10, 1)
  torch::nn::Linear model(10, 1);
  // optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  // scaler = torch.cuda.amp.GradScaler()
  mixprec::GradScaler scaler;

  // x = torch.randn(32, 10); y = torch.randn(32, 1)
  torch::Tensor x = torch::randn({32, 10});
  torch::Tensor y = torch::randn({32, 1});

  // for epoch in range(2):
  for (int epoch = 0; epoch < 2; ++epoch) {
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      // with torch.cuda.amp.autocast():
      mixprec::AutocastGuard autocast(torch::kCUDA);
      torch::Tensor pred = model->forward(x);
      loss = torch::nn::MSELoss()(pred, y);
    }
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    scaler.update();
    // print(f"Epoch {epoch+1}: scale={scaler.get_scale()}")
    std::cout << "Epoch " << epoch + 1 << ": scale=" << python_float_repr(scaler.get_scale())
              << "\n";
  }
  return 0;
}
