// libFuzzer target: the C ABI's readers of state bytes, mixprec_grad_scaler_load_state_dict and
// mixprec_optimizer_load_state_dict (fused Adam), on untrusted bytes (fuzz_input.h; the input's
// second bit picks the reader). Each must return a status, never crash, hang or allocate without
// bound; a failed load changes nothing.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "mixprec/c_api.h"

namespace {

std::vector<char> scaler_bytes(mixprec_grad_scaler* s) {
  size_t size = 0;
  if (mixprec_grad_scaler_state_dict(s, nullptr, 0, &size) != MIXPREC_OK) std::abort();
  std::vector<char> bytes(size);
  if (mixprec_grad_scaler_state_dict(s, bytes.data(), size, &size) != MIXPREC_OK) std::abort();
  return bytes;
}

std::vector<char> optimizer_bytes(void* optimizer) {
  void* data = nullptr;
  size_t size = 0;
  if (mixprec_optimizer_state_dict(optimizer, &data, &size) != MIXPREC_OK) std::abort();
  std::vector<char> bytes(static_cast<char*>(data), static_cast<char*>(data) + size);
  mixprec_bytes_free(data);
  return bytes;
}

void require_unchanged(bool same, const char* what) {
  if (!same) {
    std::fprintf(stderr, "a failed %s changed the state\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<char> bytes = mixprec::fuzz::file_bytes(data, size);
  if (size > 0 && (data[0] & 2) != 0) {
    torch::Tensor w = torch::ones({2, 3}, torch::requires_grad());
    torch::Tensor b = torch::zeros({2}, torch::requires_grad());
    void* params[] = {&w, &b};
    void* adam = nullptr;
    if (mixprec_optim_adam_create(params, 2, 0.01, 0.9, 0.999, 1e-8, 0.0, 0, &adam) != MIXPREC_OK)
      std::abort();
    const std::vector<char> before = optimizer_bytes(adam);
    if (mixprec_optimizer_load_state_dict(adam, bytes.data(), bytes.size()) != MIXPREC_OK) {
      require_unchanged(optimizer_bytes(adam) == before, "mixprec_optimizer_load_state_dict");
    }
    mixprec_optimizer_free(adam);
    return 0;
  }
  mixprec_grad_scaler* s = nullptr;
  if (mixprec_grad_scaler_create(nullptr, &s) != MIXPREC_OK) std::abort();
  const std::vector<char> before = scaler_bytes(s);
  if (mixprec_grad_scaler_load_state_dict(s, bytes.data(), bytes.size()) != MIXPREC_OK) {
    require_unchanged(scaler_bytes(s) == before, "mixprec_grad_scaler_load_state_dict");
  }
  mixprec_grad_scaler_destroy(s);
  return 0;
}
