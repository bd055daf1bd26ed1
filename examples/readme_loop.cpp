// The README's "A training loop", complete and runnable: the README shows the lines between the
// README-BEGIN and README-END markers (indented two spaces less) under the two includes, and the
// CTest readme.training_loop_is_this_file keeps the two equal. Exits non-zero unless the model
// fitted its data.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  // README-BEGIN
  // The model and the data on one device, the one autocast runs on (fp16 on CUDA, bf16 on the CPU).
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({64, 10}).to(device);
  const torch::Tensor y = x.sum(1, /*keepdim=*/true) * 0.5;  // a target the model can fit
  torch::nn::Linear model(10, 1);
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
  mixprec::GradScaler scaler;  // init_scale 2^16, growth 2, backoff 0.5, interval 2000
  for (int epoch = 0; epoch < 50; ++epoch) {
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      mixprec::AutocastGuard autocast(device.type());  // `with torch.autocast(device.type):`
      loss = torch::mse_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(optimizer);  // skipped when the grads hold inf/NaN
    scaler.update();
    if (!scaler.last_step_applied(optimizer)) {  // how to know that the step was skipped
      std::cout << "epoch " << epoch << ": step skipped, scale now " << scaler.get_scale() << "\n";
    }
  }
  // README-END
  const double loss = torch::mse_loss(model->forward(x), y).item<double>();
  const double untrained = torch::mse_loss(torch::zeros_like(y), y).item<double>();
  std::cout << "on " << device << ": loss " << loss << " (" << untrained << " for a zero model), "
            << "scale " << scaler.get_scale() << "\n";
  return loss < 0.01 * untrained ? 0 : 1;
}
