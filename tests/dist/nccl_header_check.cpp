// dist.nccl_header_is_libtorchs: a program that links mixprec::mixprec compiles against the nccl.h
// of the NCCL that its LibTorch loads. c10d's ProcessGroupNCCL::Options holds an ncclConfig_t by
// value, whose size changes between NCCL releases: with another release's header, a program that
// makes Options (examples/ddp_train.cpp) and LibTorch would disagree on where its later members
// are. The CUDA toolkit's nccl.h (CUDA 13.0: NCCL 2.28) is not a pip wheel's (torch 2.15: NCCL
// 2.30), hence mixprec_use_torch_wheel_nvidia in cmake/MixprecHelpers.cmake. Runs without a GPU:
// ncclGetVersion only reports the library's version.
#include <dlfcn.h>
#include <nccl.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>

#include "mixprec/mixprec.h"

#ifndef USE_C10D_NCCL
#error "dist.nccl_header_is_libtorchs is built only against a LibTorch with NCCL (USE_C10D_NCCL)"
#endif

int main() {
  // libtorch_cuda.so is linked with --no-as-needed, and its NCCL (found through its own RPATH) is
  // loaded with it, before main.
  void* symbol = dlsym(RTLD_DEFAULT, "ncclGetVersion");
  if (symbol == nullptr) {
    std::fprintf(stderr, "FAIL: no NCCL was loaded with LibTorch (ncclGetVersion not found)\n");
    return 1;
  }
  ncclResult_t (*get)(int*) = nullptr;
  std::memcpy(&get, &symbol, sizeof get);  // an object pointer to a function pointer (POSIX)
  int loaded = 0;
  if (get(&loaded) != ncclSuccess) {
    std::fprintf(stderr, "FAIL: ncclGetVersion failed\n");
    return 1;
  }
  const bool same = loaded == NCCL_VERSION_CODE;
  std::printf("%s: nccl.h is NCCL %d, LibTorch loaded NCCL %d (mixprec %s)\n",
              same ? "PASS" : "FAIL", NCCL_VERSION_CODE, loaded,
              same ? "programs see LibTorch's NCCL header" : "programs see another NCCL's header");
  return same ? 0 : 1;
}
