// Seed example 3: the basic mixed-precision training loop (Linear + SGD + MSELoss, two epochs).
// Prints "Epoch 1: scale=65536.0" and "Epoch 2: scale=65536.0". Autocast runs on the device the
// model is on: with a CUDA device the model and data move to it and the forward pass runs in real
// fp16 (the scale then lives on the GPU). Without CUDA everything stays on the CPU, and autocast
// runs there in fp16 where LibTorch can (2.2 and later) and in bfloat16 otherwise (1.13), with no
// warning; the scaler works on the CPU either way. The printed lines are the same.
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
      // with torch.cuda.amp.autocast():   (here: torch.autocast(device.type, dtype=float16), as
      // the seed's autocast would warn and switch itself off on a machine without CUDA)
      const c10::ScalarType dtype =
          mixprec::AutocastGuard::is_supported(device.type(), torch::kHalf) ? torch::kHalf
                                                                            : torch::kBFloat16;
      mixprec::AutocastGuard autocast(device.type(), dtype);
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
