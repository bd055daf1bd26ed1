// Seed example 1: a GradScaler with the default settings, printed.
// Python prints the object's address (<torch.cuda.amp.grad_scaler.GradScaler object at 0x...>),
// which C++ cannot reproduce; mixprec prints a one-line summary instead:
// GradScaler(scale=65536, growth_factor=2, backoff_factor=0.5, growth_interval=2000, enabled=true)
#include <mixprec/mixprec.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  // scaler = torch.cuda.amp.GradScaler()
  mixprec::GradScaler scaler;
  // print(scaler)
  std::cout << scaler << "\n";
  return 0;
}
