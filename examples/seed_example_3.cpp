// Seed example 3: the basic mixed-precision training loop (Linear + SGD + MSELoss, two epochs).
// Prints "Epoch 1: scale=65536.0" and "Epoch 2: scale=65536.0". With a CUDA device the model and
// data move to it and autocast runs the forward pass in real fp16 (the scale then lives on the
// GPU). Without CUDA everything stays on the CPU: the autocast guard warns and stays off (as
// Python does) and the scaler itself stays enabled on the CPU. The printed lines are the same.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <iostream>

#include "python_format.h"

int main() {
  using mixprec_examples::python_float_repr;

  // torch.manual_seed(0)
  torch::manual_seed(0);
  // device = "cuda" if torch.cuda.is_available() else "cpu"
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  // model = nn.Linear(10, 1).to(device)   (initialised on the CPU, so the values do not depend
  // on the device; .to(kCPU) is a no-op)
  torch::nn::Linear model(10, 1);
  model->to(device);
  // optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  // scaler = torch.cuda.amp.GradScaler()
  mixprec::GradScaler scaler;

  // x = torch.randn(32, 10).to(device); y = torch.randn(32, 1).to(device)
  torch::Tensor x = torch::randn({32, 10}).to(device);
  torch::Tensor y = torch::randn({32, 1}).to(device);

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
