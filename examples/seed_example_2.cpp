// Seed example 2: a GradScaler with custom parameters; prints "Initial scale: 1024.0".
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>

#include "python_format.h"

int main() {
  using mixprec_examples::python_float_repr;

  // scaler = torch.cuda.amp.GradScaler(init_scale=2.0**10, growth_factor=1.5,
  //                                    backoff_factor=0.25, growth_interval=100)
  mixprec::GradScaler scaler(mixprec::GradScalerOptions()
                                 .init_scale(std::pow(2.0, 10))
                                 .growth_factor(1.5)
                                 .backoff_factor(0.25)
                                 .growth_interval(100));
  // print(f"Initial scale: {scaler.get_scale()}")
  std::cout << "Initial scale: " << python_float_repr(scaler.get_scale()) << "\n";
  return 0;
}
