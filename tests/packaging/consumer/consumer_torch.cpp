// Uses mixprec::mixprec (the LibTorch API) from a consumer project.
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <iostream>

// The standard mixprec::mixprec gave this target, which asks for none (consumer/CMakeLists.txt).
static_assert(__cplusplus >= (MIXPREC_CONSUMER_CXX == 20 ? 202002L : 201703L),
              "mixprec::mixprec did not give its consumer LibTorch's C++ standard");

int main() {
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(8.0));
  const torch::Tensor scaled = scaler.scale(torch::ones({2}));
  std::cout << "consumer_torch: " << scaler << "\n";
  return scaled.sum().item<float>() == 16.0f ? 0 : 1;
}
